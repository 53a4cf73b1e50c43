"""The GPU scenario cases (tests/scenarios/gpu_cases.py) judged on snapshots built from their
scripts, without processes: what the fake NVML scenario file sets (utilization and its wave,
GPM, temperature, power, clocks, reasons, memory), the trainer's per-process sample the case
appends, and what its ``gpu_writer`` shape writes (phases, the CUDA-event span, the trainer's
CPU, the facts side file: facts, sync sites, the profiled step, allocator retries).

tests/test_scenarios_gpu.py runs the same cases end to end, through the fake NVML, the ring and
the facts side file; this holds the verdicts, evidence and remedies to the cases wherever those
producers are not in the tree yet, and fails first when a rule drifts from them.
"""

from __future__ import annotations

import re

import pytest

from tests.diagnosis_factories import GIB, Scene
from tests.scenarios.gpu_cases import CASES, NVML_SCENARIOS, GpuCase, remedy_faults
from tests.scenarios.gpu_writer import CASES as SHAPES
from tests.scenarios.gpu_writer import Shape
from traintop.collectors.snapshot import (
    GpuStepProfile,
    JobFacts,
    LoaderFacts,
    OptimizerFacts,
    SyncSite,
)
from traintop.diagnosis.api import diagnose

STEPS_PER_S = 20.0  # the writer's rate
H100_TOTAL = 81559 * (1 << 20)  # the fake's H100 preset
_SET = re.compile(r"^0 set (\S+) (\S+)$", re.MULTILINE)
_WAVE = re.compile(r"^0 wave util\.gpu (\S+) ", re.MULTILINE)


def _nvml(case: GpuCase) -> tuple[dict[str, float], float]:
    """The scenario file's readings and the amplitude of its utilization wave."""
    text = (NVML_SCENARIOS / case.nvml).read_text()
    values = {key: float(int(v, 0)) for key, v in _SET.findall(text)}
    wave = _WAVE.search(text)
    return values, float(wave.group(1)) if wave else 0.0


def _facts(raw: dict | None) -> JobFacts | None:
    if raw is None:
        return None
    optimizers = tuple(OptimizerFacts(**o) for o in raw["optimizers"])
    loaders = tuple(LoaderFacts(**lo) for lo in raw["loaders"])
    return JobFacts(**{**raw, "optimizers": optimizers, "loaders": loaders})


def _writer(shape: Shape) -> dict:
    """The Scene knobs the writer's ring records and side file set."""
    cpu = shape.cpu_share * 100.0
    steps = int(STEPS_PER_S * 300)
    sites = tuple(
        SyncSite(
            s["file"],
            s["line"],
            s["function"],
            s["kind"],
            s["per_step"],
            int(s["per_step"] * steps),
            s["code"],
        )
        for s in shape.syncs
    )
    profile = shape.profile
    return {
        "phases": shape.phases,
        "data_wait": dict(shape.phases)["data"],
        "gpu_queued": shape.queued_share,
        "trainer_cpu": cpu,
        "trainer_main": (cpu, 0.0),
        "workers": 0,
        "cuda_allocated": shape.allocated_bytes or None,
        "facts": _facts(shape.facts),
        "sync_sites": sites,
        "profile": GpuStepProfile(age_s=10.0, **profile) if profile else None,
        "alloc_retries_per_tick": round(shape.retries_per_step * STEPS_PER_S) or None,
        "step_times": (1 / STEPS_PER_S,) * 400,
        "steps_per_tick": int(STEPS_PER_S),
        "steps_per_s": STEPS_PER_S if shape.queued_share is None else 4.0,
    }


def scene_of(case: GpuCase) -> Scene:
    """The snapshots the collectors would make of the case, as a Scene."""
    nvml, wave = _nvml(case)
    util = nvml["util.gpu"]
    sm = case.proc_util[0] / 100 if case.proc_util else None
    gpm = tuple(nvml.get(f"gpm.{k}") for k in ("sm_active", "sm_occupancy", "tensor", "dram"))
    return Scene(
        gpu_util=util + wave,
        gpu_util_alt=util - wave,
        gpu_busy=sm if sm is not None else util / 100,
        busy_source="process" if sm is not None else "device",
        gpu_mem_share=nvml["mem.used"] / nvml.get("mem.total", H100_TOTAL),
        temp=nvml["temp"],
        power=nvml["power"] / 1000,
        sm_clock=int(nvml["clock.sm"]),
        reasons=int(nvml["reasons"]),
        gpm=None if None in gpm else gpm,  # type: ignore[arg-type]
        **_writer(SHAPES[case.shape]),
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_case_reads_as_it_should(name: str) -> None:
    case = CASES[name]
    verdict = diagnose(scene_of(case).window())
    primary = verdict.primary
    texts = [e.text for e in primary.evidence]
    context = f"{primary.summary}\n{texts}\n{primary.remedies}"
    assert primary.bottleneck == case.bottleneck, context
    missing = [p for p in case.evidence if not any(re.search(p, t) for t in texts)]
    assert not missing, f"{missing}\n{context}"
    assert not remedy_faults(case, list(primary.remedies)), context
    assert not {f.bottleneck for f in verdict.also} & set(case.not_also), context


def test_the_cases_cover_the_issue() -> None:
    """A launch-bound job, a sync job naming its line, a compute job already tuned, healthy
    jobs that must not be flagged, the allocator's retries."""
    assert {"host_overhead", "sync_stall", "compute_tuned", "memory_retries"} <= set(CASES)
    healthy = [c for c in CASES.values() if c.bottleneck == "compute" and c.not_also]
    assert len(healthy) >= 3
    assert SHAPES["memory"].allocated_bytes == int(77.8 * GIB)
