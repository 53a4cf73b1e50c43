"""The GPU cases: a scripted trainer (gpu_writer) on a scripted GPU (fake NVML).

Each case pairs a ``gpu_writer`` step shape with a fake NVML scenario file and says which
evidence the verdict must quote (the numbers the scenario scripted, not just any number), which
remedies it must offer, which it must never offer (what the job already does), and which
findings must not appear beside it.  The busy share comes from the card's own counters: the
scenario's utilization and GPM, and the trainer's per-process SM share, which this module
appends at run time with the line naming the trainer's real pid as the GPU's compute process,
so the collectors join the GPU, the process and the ring segment.  The ring's CUDA-event span
(``gpu_ns``) is the time work was queued, 99 % in every case that uses the GPU.
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
NO_MIXED_PRECISION = r"mixed precision|autocast\("
LAUNCH_FINDINGS = ("host_overhead", "sync_stall")


@dataclass(frozen=True)
class GpuCase:
    """One case: its name, the verdict id, the writer's step shape, the NVML script, the
    trainer's per-process (SM, memory) utilization (None: no sample, an idle process), the
    required evidence (regular expressions, each must match one evidence sentence), remedies
    that must be offered and remedies that must not (each a regular expression), findings
    that must not be listed under "also", and a short setup note."""

    name: str
    bottleneck: str
    shape: str
    nvml: str
    proc_util: tuple[int, int] | None
    evidence: tuple[str, ...]
    setup: str
    remedies: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    not_also: tuple[str, ...] = ()


CASES: dict[str, GpuCase] = {
    case.name: case
    for case in (
        GpuCase(
            "throttle_thermal",
            "throttle_thermal",
            "compute",
            "job_thermal.txt",
            (95, 44),
            (
                r"SW Thermal Slowdown \+ HW Slowdown active in 100 % of samples",
                r"GPU 0 at 84 °C, slowdown at 89 °C",
                r"SM clock 1410 of 1980 MHz",
            ),
            "compute-bound job (NVML 97 %, trainer 95 %); 84 °C, reasons 0x28, SM 1410 MHz",
        ),
        GpuCase(
            "throttle_power",
            "throttle_power",
            "compute",
            "job_power.txt",
            (96, 52),
            (
                r"SW Power Cap active in 100 % of samples",
                r"power 699 W of 700 W limit",
                r"SM clock 1755 of 1980 MHz",
            ),
            "compute-bound job (NVML 98 %, trainer 96 %); 699 of 700 W, reason 0x4, SM 1755 MHz",
        ),
        GpuCase(
            "sync_stall",
            "sync_stall",
            "sync_stall",
            "job_sync_stall.txt",
            (58, 18),
            (
                r"train\.py:123 `loss_sum \+= loss\.item\(\)` ×4 a step; the GPU idles [2-4]\d %"
                r" of the time after it",
                r"GPU busy only [5-6]\d % of the time \(NVML, the job's processes\)",
                r"a profiled step .*on syncs 29 %",
            ),
            "`.item()` after each of 4 micro-batches; NVML 60 %, trainer 58 %, span 99 %",
            remedies=(r"^take train\.py:123 `loss_sum \+= loss\.item\(\)` off the step",),
            forbidden=(NO_MIXED_PRECISION, r"non_blocking=True copies"),
        ),
        GpuCase(
            "host_overhead",
            "host_overhead",
            "host_overhead",
            "job_host_overhead.txt",
            (61, 12),
            (
                r"GPU busy only (5\d|6\d) % of the time \(NVML, the job's processes\)",
                r"work queued on the GPU 9[89] % of the step \(CUDA events\)",
                r"2,840 kernel launches a step, median kernel 9 µs",
                r"seen in the job: bf16 autocast on, not compiled, no CUDA graphs, fused AdamW",
            ),
            "the small GPT: bf16, fused AdamW, not compiled; NVML 57-67 %, span 99 %, core pegged",
            remedies=(r"^torch\.compile the model", r"CUDA graphs", r"raise the batch size"),
            forbidden=(NO_MIXED_PRECISION, r"fused optimizer"),
        ),
        GpuCase(
            "compute_tuned",
            "compute",
            "compute_tuned",
            "job_compute.txt",
            (95, 46),
            (
                r"GPU busy 9\d % of the time \(NVML, the job's processes\)",
                r"SMs 82 % active, warps 48 % of the SMs' maximum, tensor cores 56 %",
                r"seen in the job: bf16 autocast on, compiled, fused AdamW, flash attention",
            ),
            "already bf16, compiled, fused AdamW, flash; NVML 97 %, trainer 95 %, SMs 82 %",
            remedies=(r"raise the batch size",),
            forbidden=(NO_MIXED_PRECISION, r"torch\.compile", r"fused", r"scaled_dot_product"),
            not_also=LAUNCH_FINDINGS,
        ),
        GpuCase(
            "compute_logging",
            "compute",
            "compute_logging",
            "job_compute.txt",
            (95, 46),
            (r"GPU busy 9\d % of the time",),
            "healthy, `loss.item()` printed every 10th step; NVML 97 %, trainer 95 %",
            not_also=(*LAUNCH_FINDINGS, "memory"),
        ),
        GpuCase(
            "compute_spinning",
            "compute",
            "compute_spinning",
            "job_compute.txt",
            (95, 46),
            (r"GPU busy 9\d % of the time",),
            "healthy, the training thread spinning on its core; NVML 97 %, trainer 95 %",
            not_also=LAUNCH_FINDINGS,
        ),
        GpuCase(
            "idle",
            "idle",
            "idle",
            "job_idle.txt",
            None,
            (r"GPU 0 utilization 0 %", r"runs (1[5-9]|2[0-2])\.\d steps/s, none timed on the GPU"),
            "steps on the CPU, no GPU timing; GPU 0 %, 523 MiB context",
        ),
        GpuCase(
            "memory",
            "memory",
            "memory",
            "job_memory.txt",
            (94, 47),
            (r"GPU 0 memory 99 % full \(79\.5 GiB of 80\.0 GiB\)", r"tensors take 77\.8 GiB"),
            "compute-bound job, 77.8 GiB allocated; 79.5 of 80 GiB used",
        ),
        GpuCase(
            "memory_retries",
            "memory",
            "memory_retries",
            "job_compute.txt",
            (95, 46),
            (r"the CUDA allocator retried \d+ times in \d+ steps \(0\.2\d a step\)",),
            "busy card, the allocator retrying a cudaMalloc every 4th step; bf16 autocast",
            remedies=(r"^PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",),
            forbidden=(NO_MIXED_PRECISION,),
        ),
    )
}


def nvml_script(case: GpuCase, pid: int, out_dir: Path) -> Path:
    """The case's scenario with the trainer ``pid`` holding the GPU's used memory and, where
    the case has one, its per-process utilization sample."""
    text = (NVML_SCENARIOS / case.nvml).read_text()
    used = _MEM_USED.search(text)
    holding = int(used.group(1)) if used else 1 << 30
    text += f"0 proc {pid} {holding} C\n"
    if case.proc_util is not None:
        text += f"0 procutil {pid} {case.proc_util[0]} {case.proc_util[1]}\n"
    path = out_dir / f"{case.name}.nvml.txt"
    path.write_text(text)
    return path


def start_case(
    case: GpuCase, ring_dir: Path, lib: Path, out_dir: Path
) -> tuple[Workload, dict[str, str]]:
    """Start the scripted trainer; return it and the environment that sees its fake GPU."""
    env = scenario_env(ring_dir, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "tests.scenarios.gpu_writer", case.shape,
            "--seconds", str(WRITER_SECONDS)]  # fmt: skip
    job = start_workload(argv, env, out_dir / f"{case.name}.log")
    script = nvml_script(case, job.pid, out_dir)
    env.update(LD_LIBRARY_PATH=str(lib.parent), FAKE_NVML_SCENARIO=str(script))
    return job, env


def missing_evidence(case: GpuCase, evidence: list[str]) -> list[str]:
    """The case's required patterns that no evidence sentence matches."""
    return [p for p in case.evidence if not any(re.search(p, text) for text in evidence)]


def remedy_faults(case: GpuCase, remedies: list[str]) -> list[str]:
    """What is wrong with the offered remedies: a required one missing, a forbidden one there."""
    missing = [f"missing: {p}" for p in case.remedies if not any(re.search(p, r) for r in remedies)]
    offered = [f"offered: {r}" for r in remedies if any(re.search(p, r) for p in case.forbidden)]
    return missing + offered
