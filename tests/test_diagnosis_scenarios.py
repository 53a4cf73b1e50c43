"""Rule tests built from the numbers real workloads showed (docs/scenarios.md).

Each rule that a real CPU PyTorch job proved wrong has a positive case and a near miss here,
with the figures measured on the 2-CPU development VM under `traintop run`.
"""

from __future__ import annotations

import pytest

from tests.diagnosis_factories import TRAINER_PID, Scene
from traintop.collectors.snapshot import JobSnapshot
from traintop.diagnosis.api import diagnose
from traintop.diagnosis.demand import cpu_demand, group_members
from traintop.diagnosis.memo import Memo
from traintop.diagnosis.views import PROCS, proc_view, window_step_times

# A CPU-only trainer on 2 logical CPUs (num_workers=0), as every scenario workload runs.
CPU_JOB = Scene(
    cpus=2,
    gpu_count=0,
    gpu_busy=None,
    workers=0,
    trainer_threads=4,
    data_wait=0.01,
    cpu_busy=99,
)
# compute.py: 4 threads, 192 % CPU at full speed (8.6 steps/s) beside other engineers' load.
COMPUTE = CPU_JOB.but(trainer_cpu=192, load=3.5)
# oversubscribed.py: three trainers of 8 threads each, ~48 % CPU each, load still 3.0.
OVERSUBSCRIBED = CPU_JOB.but(trainer_threads=8, trainer_cpu=48, load=3.0, extra_jobs=2)
# periodic_stall.py: 4.2 ms steps, a 170 ms checkpoint + fsync every 25 steps, 75 steps/s.
CHECKPOINTS = tuple(0.17 if i % 25 == 24 else 0.0042 for i in range(825))
STALL = CPU_JOB.but(trainer_threads=2, trainer_cpu=75, cpu_busy=89, iowait=11, data_wait=0.07)
# data_cpu.py: trainer (3 threads) at 1 %, 2 workers (3 threads) near 49 % each, others busy.
DATA_CPU = CPU_JOB.but(
    trainer_threads=3, trainer_cpu=1, workers=2, worker_threads=3, worker_cpu=49, data_wait=0.99
)
# data_starved.py: 20 ms sleep per sample, num_workers=0, trainer at 5 %, others fill the host.
DATA_STARVED = CPU_JOB.but(trainer_cpu=5, data_wait=0.99, cpu_busy=100)
# data_io.py: 2 workers at 1-2 % CPU reading 8.4 MB/s each (O_DIRECT, throttled loop device).
DATA_IO = CPU_JOB.but(
    workers=2, worker_cpu=2, worker_read=8.4e6, data_wait=0.99, iowait=48, cpu_busy=27
)


def _ids(scene: Scene) -> set[str]:
    verdict = diagnose(scene.window())
    return {f.bottleneck for f in (verdict.primary, *verdict.also)}


def _primary(scene: Scene):
    return diagnose(scene.window()).primary


POSITIVE = {
    "compute at full speed, load 3.5 from others": (COMPUTE, "compute"),
    "compute crowded out by other processes (trainer 68 %)": (
        COMPUTE.but(trainer_cpu=68, load=4.2),
        "compute",
    ),
    "three 8-thread trainers on 2 CPUs": (OVERSUBSCRIBED, "oversubscribed"),
    "checkpoint every 25 steps": (
        STALL.but(step_times=CHECKPOINTS, steps_per_tick=75),
        "periodic_stall",
    ),
    "eval every 200 steps, none among the newest 120": (
        CPU_JOB.but(
            trainer_cpu=190,
            step_times=tuple(2.0 if i % 200 == 100 else 0.01 for i in range(825)),
            steps_per_tick=75,
        ),
        "periodic_stall",
    ),
    "data_io: workers read from a throttled disk": (DATA_IO, "data_io"),
    "data_io on a host others fill: no iowait, idle readers": (
        DATA_IO.but(iowait=0, cpu_busy=99),
        "data_io",
    ),
    "data_cpu: workers get a slice of a host others fill": (DATA_CPU, "data_cpu"),
    "data_starved: a sleeping loader on a host others fill": (DATA_STARVED, "data_starved"),
    "compute crowded to 45 % at load 6.6": (COMPUTE.but(trainer_cpu=45, load=6.6), "compute"),
}

NEAR_MISSES = {
    "compute's own 4 threads are not oversubscription": (
        COMPUTE.but(trainer_cpu=100, load=4.2),
        "oversubscribed",
    ),
    "data_cpu's 9 threads crowded by other processes are not oversubscription": (
        DATA_CPU,
        "oversubscribed",
    ),
    "8 threads getting all they can use are not short of CPU": (
        CPU_JOB.but(trainer_threads=8, trainer_cpu=190, load=3.0),
        "oversubscribed",
    ),
    "DDP rank at 3 % CPU is waiting, not computing": (
        CPU_JOB.but(trainer_cpu=3, cpu_busy=30),
        "compute",
    ),
    "3 % CPU on a full machine is not computing either": (
        CPU_JOB.but(trainer_cpu=3, cpu_busy=99),
        "compute",
    ),
    "idle loaders that read nothing are not data_io": (
        DATA_IO.but(iowait=0, cpu_busy=99, worker_read=0.0),
        "data_io",
    ),
    "a sleeping loader on a full host is not data_cpu": (DATA_STARVED, "data_cpu"),
    "checkpoint fsync iowait without reads is not data_io": (
        STALL.but(data_wait=0.24, disk_read=0.1e6),
        "data_io",
    ),
    "one GC pause in 825 steps is not a periodic stall": (
        CPU_JOB.but(
            trainer_cpu=190,
            step_times=tuple(0.2 if i == 400 else 0.01 for i in range(825)),
            steps_per_tick=75,
        ),
        "periodic_stall",
    ),
}


@pytest.mark.parametrize(("scene", "expected"), POSITIVE.values(), ids=POSITIVE.keys())
def test_scenario_numbers_give_the_bottleneck(scene: Scene, expected: str) -> None:
    assert _primary(scene).bottleneck == expected


@pytest.mark.parametrize(("scene", "absent"), NEAR_MISSES.values(), ids=NEAR_MISSES.keys())
def test_scenario_near_miss_is_not_reported(scene: Scene, absent: str) -> None:
    assert absent not in _ids(scene)


def test_oversubscribed_counts_every_attached_job() -> None:
    texts = [e.text for e in _primary(OVERSUBSCRIBED).evidence]
    assert "3 training jobs run 24 threads on 2 CPUs" in texts
    assert "they get 144 % CPU of the 600 % their threads could use" in texts


def test_data_io_names_the_reads() -> None:
    texts = [e.text for e in _primary(DATA_IO).evidence]
    assert any(t.startswith("job reads 16.8 MB/s") for t in texts), texts


def test_fsync_iowait_leaves_the_data_rules_free() -> None:
    """Write-only iowait must not veto data_cpu/data_starved: the wait is then explained by
    the loop itself, not by storage."""
    assert _primary(STALL.but(data_wait=0.4, trainer_cpu=99)).bottleneck == "data_cpu"


def test_compute_evidence_names_the_thread_budget() -> None:
    texts = [e.text for e in _primary(COMPUTE).evidence]
    assert (
        "no GPU: training runs on the CPU (trainer at 192 % CPU of 200 % its threads could use)"
        in texts
    )


def test_window_step_times_keeps_each_step_once() -> None:
    def job(total: int, recent: tuple[float, ...]) -> JobSnapshot:
        return JobSnapshot(TRAINER_PID, "t", 0, 0, 1, "live", total, None, None, None, None,
                           None, None, None, None, None, recent_step_times_s=recent)  # fmt: skip

    samples = [job(3, (1.0, 2.0, 3.0)), job(5, (2.0, 3.0, 4.0, 5.0)), job(5, (4.0, 5.0))]
    assert window_step_times(samples) == (1.0, 2.0, 3.0, 4.0, 5.0)
    restarted = [*samples, job(2, (7.0, 8.0)), job(3, (7.0, 8.0, 9.0))]
    assert window_step_times(restarted)[-1:] == (9.0,)


def test_cpu_demand_groups_workers_under_their_job() -> None:
    latest = DATA_IO.but(extra_jobs=1).window(n=1)[0]
    window = Memo().window([latest])
    procs = {p.pid: proc_view(window.track(PROCS, p.pid)) for p in latest.processes}
    demand = cpu_demand(latest.jobs, group_members(latest.processes), procs, cpus=2)
    assert demand is not None
    assert (demand.jobs, demand.threads) == (2, 4 + 2 * 4 + 4)
    assert demand.want_pct == 400.0
