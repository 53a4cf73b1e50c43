"""Table-driven rule tests: each situation must yield its bottleneck as the primary."""

from __future__ import annotations

import pytest

from tests.diagnosis_factories import GIB, TRAINER_PID, Scene
from traintop.diagnosis.api import diagnose
from traintop.diagnosis.model import Verdict

HEALTHY = Scene()
SYSTEM = Scene(attach=False)
STEPS_WITH_CHECKPOINTS = (0.25,) * 47 + (5.0, 4.0, 6.0)

ATTACH_CASES = {
    "data_cpu: workers saturated": (
        HEALTHY.but(data_wait=0.62, worker_cpu=98, gpu_busy=0.38, gpu_util=45, cpu_busy=60),
        "data_cpu",
    ),
    "data_cpu: num_workers=0 and trainer pegged": (
        HEALTHY.but(workers=0, data_wait=0.5, trainer_cpu=99, gpu_busy=0.5, gpu_util=50),
        "data_cpu",
    ),
    "data_io: disk busy and iowait": (
        HEALTHY.but(
            data_wait=0.55,
            worker_cpu=15,
            iowait=25,
            disk_busy=97,
            disk_await=45,
            disk_read=3.1e6,
            gpu_busy=0.45,
            gpu_util=40,
        ),
        "data_io",
    ),
    "data_starved: idle workers, idle disk": (
        HEALTHY.but(data_wait=0.4, workers=2, worker_cpu=40, gpu_busy=0.6, gpu_util=60),
        "data_starved",
    ),
    "compute: healthy": (HEALTHY, "compute"),
    "compute: CPU-only job": (
        HEALTHY.but(
            cpus=2,
            gpu_count=0,
            gpu_busy=None,
            workers=0,
            trainer_threads=4,
            trainer_cpu=192,
            cpu_busy=99,
        ),
        "compute",
    ),
    "host_overhead: trainer pegged, GPU gaps": (
        HEALTHY.but(gpu_busy=0.55, gpu_util=60, gpu_util_alt=25, trainer_cpu=99),
        "host_overhead",
    ),
    "sync_stall: GPU idle, trainer waiting": (
        HEALTHY.but(
            gpu_busy=0.45,
            gpu_util=50,
            trainer_cpu=40,
            phases=(("data", 0.04), ("fwd", 0.2), ("bwd", 0.2), ("loss_item", 0.56)),
        ),
        "sync_stall",
    ),
    "network: comm phase dominates": (
        HEALTHY.but(
            world_size=16,
            gpu_busy=0.5,
            gpu_util=55,
            trainer_cpu=50,
            nic_util=92,
            phases=(("data", 0.03), ("fwd", 0.2), ("bwd", 0.25), ("comm", 0.52)),
        ),
        "network",
    ),
    "throttle_thermal: SW thermal + HW slowdown": (
        HEALTHY.but(temp=88, reasons=0x20 | 0x8, sm_clock=1300),
        "throttle_thermal",
    ),
    "throttle_power: SW power cap": (
        HEALTHY.but(reasons=0x4, power=699, sm_clock=1600),
        "throttle_power",
    ),
    "throttle_power: HW slowdown on a cool GPU": (
        HEALTHY.but(reasons=0x8, temp=60, sm_clock=990),
        "throttle_power",
    ),
    "host_memory: host swapping": (HEALTHY.but(swap_bytes_per_s=80e6), "host_memory"),
    "memory: the job's tensors fill the GPU": (
        HEALTHY.but(gpu_mem_share=0.994, cuda_allocated=int(77.8 * GIB)),
        "memory",
    ),
    "periodic_stall: checkpoint steps": (
        HEALTHY.but(step_times=STEPS_WITH_CHECKPOINTS),
        "periodic_stall",
    ),
    "oversubscribed: load 5x cores": (
        HEALTHY.but(cpu_busy=99, load=40, trainer_threads=64, gpu_count=0, gpu_busy=None),
        "oversubscribed",
    ),
    "idle: stalled job": (  # stalled for 7 s: the rank stalls, not yet the job (10 s)
        HEALTHY.but(gpu_util=0, gpu_busy=None, state="stalled", last_step_age=7.0),
        "idle",
    ),
    "hang: no step past the job's stall limit": (
        HEALTHY.but(gpu_util=0, gpu_busy=None, state="stalled", last_step_age=45.0),
        "hang",
    ),
    "idle: job runs on CPU beside an idle GPU": (
        HEALTHY.but(gpu_util=0, gpu_busy=None, gpu_on_job=False),
        "idle",
    ),
}

SYSTEM_CASES = {
    "compute": (SYSTEM, "compute"),
    "data_cpu: host saturated": (
        SYSTEM.but(gpu_util=40, gpu_util_alt=70, cpu_busy=97, worker_cpu=99),
        "data_cpu",
    ),
    "data_io: iowait and queueing disk": (
        SYSTEM.but(gpu_util=35, iowait=30, disk_busy=99, disk_await=60),
        "data_io",
    ),
    "host_overhead: one core pegged": (
        SYSTEM.but(gpu_util=55, gpu_util_alt=15, trainer_cpu=100, cpu_busy=20),
        "host_overhead",
    ),
    "data_starved: underused, no saturation": (
        SYSTEM.but(gpu_util=50, trainer_cpu=50, cpu_busy=30),
        "data_starved",
    ),
    "network: NIC at link speed": (
        SYSTEM.but(gpu_util=45, nic_util=95, trainer_cpu=40),
        "network",
    ),
    "throttle_thermal": (SYSTEM.but(temp=90, reasons=0x40, sm_clock=1000), "throttle_thermal"),
    "idle: process holds the GPU": (SYSTEM.but(gpu_util=0), "idle"),
    "idle: nothing runs": (SYSTEM.but(gpu_util=0, gpu_on_job=False, reasons=0x1), "idle"),
}


def primary(window) -> str:
    return diagnose(window).primary.bottleneck


@pytest.mark.parametrize(("scene", "expected"), ATTACH_CASES.values(), ids=ATTACH_CASES.keys())
def test_attach_mode_primary(scene: Scene, expected: str) -> None:
    verdict = diagnose(scene.window())
    assert verdict.mode == "attach"
    assert verdict.primary.bottleneck == expected, verdict.primary.summary


@pytest.mark.parametrize(("scene", "expected"), SYSTEM_CASES.values(), ids=SYSTEM_CASES.keys())
def test_system_mode_primary(scene: Scene, expected: str) -> None:
    verdict = diagnose(scene.window())
    assert verdict.mode == "system"
    assert verdict.primary.bottleneck == expected, verdict.primary.summary


def test_every_finding_is_well_formed() -> None:
    for scene, _ in [*ATTACH_CASES.values(), *SYSTEM_CASES.values()]:
        verdict = diagnose(scene.window())
        for f in (verdict.primary, *verdict.also):
            assert 0.0 < f.confidence <= 1.0
            assert f.severity in ("ok", "info", "warning", "error")
            assert f.evidence, f.bottleneck
            assert all(e.panel in _PANELS for e in f.evidence)


_PANELS = {"gpu", "cpu", "memory", "disk", "network", "processes", "training", "dataloader"}


def _all_ids(verdict: Verdict) -> set[str]:
    return {f.bottleneck for f in (verdict.primary, *verdict.also)}


NEAR_MISSES = {
    "data wait 10 % is not a data bottleneck": (
        HEALTHY.but(data_wait=0.10, worker_cpu=98),
        {"data_cpu", "data_io", "data_starved"},
    ),
    "86 °C without reason bits is not throttling": (
        HEALTHY.but(temp=86),
        {"throttle_thermal", "throttle_power"},
    ),
    "GPU-idle reason bit is not throttling": (
        SYSTEM.but(gpu_util=0, reasons=0x1),
        {"throttle_thermal", "throttle_power"},
    ),
    "power cap on an idle GPU is not throttling": (
        HEALTHY.but(gpu_util=5, gpu_busy=None, reasons=0x4),
        {"throttle_power"},
    ),
    "disk 50 % busy is not storage-bound": (
        HEALTHY.but(data_wait=0.4, worker_cpu=30, disk_busy=50, disk_await=30),
        {"data_io"},
    ),
    "busy NVMe with short queue is not storage-bound": (
        HEALTHY.but(data_wait=0.4, disk_busy=100, disk_await=0.3),
        {"data_io"},
    ),
    "one step at 2x median is not a periodic stall": (
        HEALTHY.but(step_times=(0.25,) * 49 + (0.5,)),
        {"periodic_stall"},
    ),
    "load 1.2x cores is not oversubscribed": (
        HEALTHY.but(cpu_busy=95, load=9.6),
        {"oversubscribed"},
    ),
    "trainer at 80 % is not host overhead": (
        HEALTHY.but(gpu_busy=0.55, trainer_cpu=80),
        {"host_overhead"},
    ),
    "GPU memory 90 % is not memory pressure": (HEALTHY.but(gpu_mem_share=0.9), {"memory"}),
    "busy NIC on a single-rank job is not network": (
        HEALTHY.but(nic_util=95, gpu_busy=0.5, trainer_cpu=40),
        {"network"},
    ),
}


@pytest.mark.parametrize(("scene", "absent"), NEAR_MISSES.values(), ids=NEAR_MISSES.keys())
def test_near_miss_is_not_reported(scene: Scene, absent: set[str]) -> None:
    assert not _all_ids(diagnose(scene.window())) & absent


def test_job_pid_selects_the_job() -> None:
    window = HEALTHY.window()
    assert diagnose(window, job_pid=TRAINER_PID).primary.bottleneck == "compute"
    missing = diagnose(window, job_pid=1)
    assert missing.primary.bottleneck == "unknown"
    assert "pid 1" in missing.primary.summary


def test_near_oom_names_the_bytes() -> None:
    scene = HEALTHY.but(gpu_mem_share=79.5 / 80, cuda_allocated=int(77.8 * GIB))
    primary = diagnose(scene.window()).primary
    texts = [e.text for e in primary.evidence]
    assert primary.severity == "warning"
    assert "GPU 0 memory 99 % full (79.5 GiB of 80.0 GiB)" in texts
    assert "the job's tensors take 77.8 GiB (97 % of the card)" in texts


@pytest.mark.parametrize(
    "scene",
    [
        HEALTHY.but(gpu_mem_share=0.99, cuda_allocated=30 * GIB),  # the rest is PyTorch's cache
        HEALTHY.but(gpu_mem_share=0.99),  # allocation unknown (TF/JAX preallocate)
        HEALTHY.but(gpu_mem_share=0.97, cuda_allocated=int(77.0 * GIB)),  # 2.4 GiB headroom
    ],
    ids=["cache", "unknown allocation", "97 % full"],
)
def test_full_gpu_without_near_oom_stays_advice(scene: Scene) -> None:
    verdict = diagnose(scene.window())
    memory = next(f for f in verdict.also if f.bottleneck == "memory")
    assert verdict.primary.bottleneck == "compute"
    assert memory.severity == "info"


def test_idle_live_job_quotes_its_step_rate() -> None:
    """A job stepping while its GPU idles proves the model is not on the GPU; the age of its
    last step (milliseconds) proves nothing."""
    scene = HEALTHY.but(gpu_util=0, gpu_busy=None)
    texts = [e.text for e in diagnose(scene.window()).primary.evidence]
    assert texts == [
        "GPU 0 utilization 0 %",
        "job train.py runs 4.0 steps/s, none timed on the GPU",
    ]


def test_long_steps_of_a_trainer_queued_for_a_cpu_are_not_periodic_stalls() -> None:
    """Scheduler hiccups on a crowded host (8 of 90 steps 4x the median, 25 % of the time):
    a periodic stall while the trainer never waits for a CPU, contention when its main thread
    spent 60 % of the window queued for one."""
    hiccups = ((0.1,) * 10 + (0.4,)) * 8 + (0.1,) * 2
    scene = HEALTHY.but(step_times=hiccups, gpu_count=0, gpu_busy=None, trainer_cpu=95)
    alone = diagnose(scene.window())
    crowded = diagnose(scene.but(trainer_main=(40.0, 60.0)).window())
    assert "periodic_stall" in [f.bottleneck for f in (alone.primary, *alone.also)]
    assert "periodic_stall" not in [f.bottleneck for f in (crowded.primary, *crowded.also)]
