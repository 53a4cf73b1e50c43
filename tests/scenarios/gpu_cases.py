"""The GPU-only bottleneck cases: a scripted trainer (gpu_writer) on a scripted GPU (fake NVML).

Each case pairs a ``gpu_writer`` step shape with a fake NVML scenario file and says which
evidence the verdict must quote: the numbers the scenario scripted, not just any number.
The scenario file gets one line appended at run time, naming the trainer's real pid as the
GPU's compute process, so the collectors join the GPU, the process and the ring segment.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.scenarios.harness import Workload, scenario_env, start_workload

REPO = Path(__file__).resolve().parents[2]
NVML_SCENARIOS = REPO / "tests" / "fakenvml" / "scenarios"
WRITER_SECONDS = 45.0
_MEM_USED = re.compile(r"^0 set mem\.used (\d+)$", re.MULTILINE)


@dataclass(frozen=True)
class GpuCase:
    """One case: the verdict id, the writer's step shape, the NVML script, required evidence
    (regular expressions, each must match one evidence sentence) and a short setup note."""

    bottleneck: str
    shape: str
    nvml: str
    evidence: tuple[str, ...]
    setup: str


CASES: dict[str, GpuCase] = {
    case.bottleneck: case
    for case in (
        GpuCase(
            "throttle_thermal",
            "compute",
            "job_thermal.txt",
            (
                r"SW Thermal Slowdown \+ HW Slowdown active in 100 % of samples",
                r"GPU 0 at 84 °C, slowdown at 89 °C",
                r"SM clock 1410 of 1980 MHz",
            ),
            "compute-bound job (GPU busy 94 %); 84 °C, reasons 0x28, SM 1410 MHz",
        ),
        GpuCase(
            "throttle_power",
            "compute",
            "job_power.txt",
            (
                r"SW Power Cap active in 100 % of samples",
                r"power 699 W of 700 W limit",
                r"SM clock 1755 of 1980 MHz",
            ),
            "compute-bound job (GPU busy 94 %); 699 of 700 W, reason 0x4, SM 1755 MHz",
        ),
        GpuCase(
            "sync_stall",
            "sync_stall",
            "job_sync_stall.txt",
            (
                r"GPU busy only 3\d % of step",
                r"phase 'loss_item' \(5\d %",
                r"trainer at [1-3]?\d % CPU",
            ),
            "50 % of each step in `loss_item`, GPU busy 38 %, trainer sleeps",
        ),
        GpuCase(
            "host_overhead",
            "host_overhead",
            "job_host_overhead.txt",
            (
                r"GPU busy only 4\d % of step",
                r"at (9\d|1\d\d) % CPU: one core pegged|for a CPU \d+ % of the time: it wants",
            ),
            "GPU busy 42 %, trainer burns its core the whole step",
        ),
        GpuCase(
            "idle",
            "idle",
            "job_idle.txt",
            (r"GPU 0 utilization 0 %", r"runs (1[5-9]|2[0-2])\.\d steps/s, none timed on the GPU"),
            "steps on the CPU, no GPU timing; GPU 0 %, 523 MiB context",
        ),
        GpuCase(
            "memory",
            "memory",
            "job_memory.txt",
            (r"GPU 0 memory 99 % full \(79\.5 GiB of 80\.0 GiB\)", r"tensors take 77\.8 GiB"),
            "compute-bound job, 77.8 GiB allocated; 79.5 of 80 GiB used",
        ),
    )
}


def nvml_script(case: GpuCase, pid: int, out_dir: Path) -> Path:
    """The case's scenario with the trainer ``pid`` holding the GPU's used memory."""
    text = (NVML_SCENARIOS / case.nvml).read_text()
    used = _MEM_USED.search(text)
    holding = int(used.group(1)) if used else 1 << 30
    path = out_dir / f"{case.bottleneck}.nvml.txt"
    path.write_text(f"{text}0 proc {pid} {holding} C\n")
    return path


def start_case(
    case: GpuCase, ring_dir: Path, lib: Path, out_dir: Path
) -> tuple[Workload, dict[str, str]]:
    """Start the scripted trainer; return it and the environment that sees its fake GPU."""
    env = scenario_env(ring_dir, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "tests.scenarios.gpu_writer", case.shape,
            "--seconds", str(WRITER_SECONDS)]  # fmt: skip
    job = start_workload(argv, env, out_dir / f"{case.bottleneck}.log")
    script = nvml_script(case, job.pid, out_dir)
    env.update(LD_LIBRARY_PATH=str(lib.parent), FAKE_NVML_SCENARIO=str(script))
    return job, env


def missing_evidence(case: GpuCase, evidence: list[str]) -> list[str]:
    """The case's required patterns that no evidence sentence matches."""
    return [p for p in case.evidence if not any(re.search(p, text) for text in evidence)]
