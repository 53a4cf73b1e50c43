"""The quiet killers on scripted windows (issue 43): host memory running out, a thread holding
the GIL, a straggler's own cause, ranks waiting for a peer busy elsewhere.  The real-process
cases are in tests/test_killers.py; here every branch is driven with what the collectors report.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests import snapshot_fixtures as sf
from tests.diagnosis_factories import GIB, TRAINER_PID, Scene
from tests.test_diagnosis_jobs import DDP, ids, rank, window
from traintop.collectors.memory_state import (
    CgroupMemory,
    JobMemory,
    Pressure,
    PressureSet,
    UniqueMemory,
)
from traintop.collectors.snapshot import (
    CpuLimit,
    Frame,
    JobFacts,
    LoaderFacts,
    PyThread,
    Snapshot,
    ThreadCpu,
)
from traintop.diagnosis import remedies_host
from traintop.diagnosis.api import diagnose
from traintop.diagnosis.pause import pause_of

MIB = 1 << 20
CPU_JOB = Scene(gpu_count=0, workers=3, data_wait=0.3, gpu_busy=None, trainer_cpu=60,
                worker_cpu=20, phases=(("data", 0.3), ("forward", 0.7)))  # fmt: skip
COMPUTE = Scene(gpu_count=0, workers=0, gpu_busy=None, trainer_cpu=190, trainer_threads=2,
                cpus=2, data_wait=0.0)  # fmt: skip
WORKERS = range(TRAINER_PID + 100, TRAINER_PID + 103)


def _memory(used: int, growth: float | None, limit: int = 4 * GIB, hits: int = 0,
            workers_growth: float | None = 2 * MIB, workers: bool = True) -> JobMemory:  # fmt: skip
    cgroup = CgroupMemory("/job", 1, limit, used + 100 * MIB, used, used, hits, None, 0, growth)
    procs = (UniqueMemory(TRAINER_PID, 800 * MIB, 1200 * MIB, 0, None, 1.0, 60.0),
             *(UniqueMemory(pid, 300 * MIB, 500 * MIB, 0, workers_growth, 1.0, 50.0)
               for pid in (WORKERS if workers else ())))  # fmt: skip
    return JobMemory(cgroup, procs, True)


def with_jobs(snaps: list[Snapshot], **changes) -> list[Snapshot]:
    return [replace(s, jobs=tuple(replace(j, **changes) for j in s.jobs)) for s in snaps]


def test_a_cgroup_limit_reached_in_minutes_is_host_memory_and_leads() -> None:
    """4 GiB limit, 3.5 GiB in use, +6 MiB/s: about 85 s left; the workers copy the data."""
    snaps = with_jobs(CPU_JOB.window(), memory=_memory(3584 * MIB, 6 * MIB))
    verdict = diagnose(snaps)
    found = verdict.primary
    assert (found.bottleneck, found.severity) == ("host_memory", "error")
    assert found.summary == (
        "Out of memory in about 1m25s: its cgroup's memory limit at the current growth"
    )
    first = found.evidence[0]
    assert first.text == (
        "the job's cgroup (/job) holds 3.5 GiB of its 4.0 GiB limit; at +377.5 MB/min, the "
        "cgroup's 4.0 GiB limit is reached in about 1m25s"
    )
    assert first.value is not None and 80 < first.value < 90
    assert "3 DataLoader workers' own memory (USS) 300 MiB each, growing +377.5 MB/min" in (
        found.evidence[1].text
    )
    assert found.remedies[0] == remedies_host.ARRAYS  # the workers' copies are the growth
    assert found.remedies[1].startswith("lower DataLoader num_workers from 3 to 2: frees about")


def test_an_hour_away_is_a_warning_above_healthy_compute() -> None:
    snaps = with_jobs(COMPUTE.window(), memory=_memory(2 * GIB, 600 * 1024, workers=False))
    verdict = diagnose(snaps)
    assert verdict.primary.bottleneck == "host_memory" and verdict.primary.severity == "warning"
    assert "compute" in ids(verdict)
    assert remedies_host.ARRAYS not in verdict.primary.remedies  # no worker copies the data


def test_persistent_workers_that_copy_are_told_to_stop_persisting() -> None:
    loader = LoaderFacts(3, False, True, 2, 16)
    snaps = with_jobs(CPU_JOB.window(), memory=_memory(3584 * MIB, 6 * MIB),
                      facts=JobFacts(device="cpu", loaders=(loader,)))  # fmt: skip
    remedies = diagnose(snaps).primary.remedies
    assert remedies[1] == remedies_host.NOT_PERSISTENT
    assert "lower prefetch_factor from 2 to 1: 3 workers hold 2 batches each in flight" in remedies
    not_persistent = replace(loader, persistent_workers=False)
    snaps = with_jobs(snaps, facts=JobFacts(device="cpu", loaders=(not_persistent,)))
    assert remedies_host.NOT_PERSISTENT not in diagnose(snaps).primary.remedies


def test_a_steady_or_far_limit_is_no_verdict() -> None:
    for memory in (_memory(3584 * MIB, None), _memory(1 * GIB, 100 * 1024),
                   _memory(3584 * MIB, 1.0)):  # fmt: skip
        assert "host_memory" not in ids(diagnose(with_jobs(CPU_JOB.window(), memory=memory)))


def _host(snaps: list[Snapshot], available: int, trend: float) -> list[Snapshot]:
    fall = {"available_bytes": available, "available_trend_bytes_per_s": trend}
    return [replace(s, memory=replace(s.memory, **fall)) for s in snaps]


def test_the_hosts_ram_counts_only_when_the_job_makes_its_growth() -> None:
    """512 GiB host with 10 GiB left, falling 20 MiB/s: the job's workers grow 6 MiB/s of it
    (under half: another process fills the host, not this job), then 12 MiB/s (this job)."""
    alone = _memory(10 * GIB, None, limit=0, workers_growth=2 * MIB)
    snaps = _host(with_jobs(CPU_JOB.window(), memory=alone), 10 * GIB, -20 * MIB)
    assert "host_memory" not in ids(diagnose(snaps))
    mine = _memory(10 * GIB, None, limit=0, workers_growth=4 * MIB)
    found = diagnose(_host(with_jobs(CPU_JOB.window(), memory=mine), 10 * GIB, -20 * MIB))
    assert found.primary.bottleneck == "host_memory"
    assert "the host's 512.0 GiB of RAM is reached in about 8m32s" in found.primary.evidence[0].text


def test_memory_pressure_is_the_limit_now() -> None:
    psi = PressureSet(None, Pressure(0.3, 0.08, 25.0), None)
    snaps = [replace(s, pressure=psi) for s in COMPUTE.window()]
    found = diagnose(snaps).primary
    assert found.bottleneck == "host_memory" and found.share == pytest.approx(0.3)
    assert found.evidence[0].text == (
        "memory pressure (PSI, the host's): some task stalled on memory 30 % of the time, all "
        "tasks 8 %"
    )


def test_swap_in_against_the_loaders_wait() -> None:
    snaps = CPU_JOB.but(swap_bytes_per_s=40e6).window()
    found = diagnose(snaps).primary
    assert found.bottleneck == "host_memory" and found.summary.startswith("Host is swapping")
    texts = [e.text for e in found.evidence]
    assert texts[:2] == ["host swapping 40.0 MB/s",
                         "swap-in 20.0 MB/s while the loader waits 30 % of the time"]  # fmt: skip


# ---- GIL ----

AGGREGATE = (Frame("/usr/lib/python3.11/threading.py", 1002, "_bootstrap"),
             Frame("/job/train.py", 38, "aggregate", "totals[i % 17] += i * 0.5"))  # fmt: skip
GIL_JOB = Scene(gpu_count=0, workers=0, data_wait=0.01, gpu_busy=None, trainer_cpu=102,
                trainer_threads=3, cpus=2, phases=(("forward", 0.99),))  # fmt: skip


def _thread(tid: int, name: str, held: int, free: int, training: bool = False,
            frames: tuple[Frame, ...] = ()) -> PyThread:  # fmt: skip
    """A thread that ran in ``held`` of 30 windows while the GIL was held, ``free`` while free."""
    return PyThread(tid, name, training, 10, held, free, 30, frames, 7)


def _gil_window(holder: PyThread, cpu: float, wait: float = 0.0) -> list[Snapshot]:
    main = _thread(TRAINER_PID, "MainThread", 2, 24, training=True)
    snaps = with_jobs(GIL_JOB.window(), threads=(main, holder))
    return [replace(s, processes=tuple(
        replace(p, thread_cpu=(ThreadCpu(holder.tid, cpu, wait),)) if p.pid == TRAINER_PID
        else p for p in s.processes)) for s in snaps]  # fmt: skip


def test_a_thread_holding_the_gil_is_named_with_its_share_and_frame() -> None:
    holder = _thread(4300, "stats-aggregator", 0, 22, frames=AGGREGATE)
    found = diagnose(_gil_window(holder, 40.0, 10.0)).primary
    assert found.bottleneck == "gil_contention" and found.share == pytest.approx(0.5)
    assert found.summary == (
        "Thread 'stats-aggregator' holds the interpreter 50 % of the time: the training loop "
        "waits for the GIL"
    )
    assert found.evidence[0].text == (
        "thread 'stats-aggregator' (tid 4300) runs or queues for a CPU 50 % of the time and "
        "needs the GIL: it ran in 0 of 30 windows while another thread held it, 22 while it "
        "was free, in 7 of 10 samples at train.py:38 in aggregate: totals[i % 17] += i * 0.5"
    )
    assert found.remedies[0].startswith("move what thread 'stats-aggregator' does to a separate")


def test_threads_that_wait_or_run_without_the_gil_are_never_named() -> None:
    cases = {
        "an idle logger": (_thread(4301, "metrics-logger", 0, 1), 1.0),
        "a reader in the kernel": (_thread(4302, "shard-reader", 20, 21), 80.0),
        "a thread in C without the GIL": (_thread(4303, "comm-worker", 9, 12), 60.0),
        "a thread the CPUs rarely run": (_thread(4303, "comm-worker", 0, 4), 60.0),
        "a waiting thread": (_thread(4304, "nccl-watchdog", 0, 0), 0.0),
        "a holder the kernel rarely runs": (_thread(4305, "stats", 0, 22), 10.0),
    }
    for what, (thread, cpu) in cases.items():
        assert "gil_contention" not in ids(diagnose(_gil_window(thread, cpu))), what


def test_a_busy_device_is_the_limit_whatever_the_interpreter_does() -> None:
    holder = _thread(4300, "stats-aggregator", 0, 22, frames=AGGREGATE)
    snaps = _gil_window(holder, 50.0)
    gpu = GIL_JOB.but(gpu_count=1, gpu_busy=0.95).window()
    mixed = [
        replace(g, jobs=s.jobs, processes=s.processes) for g, s in zip(gpu, snaps, strict=True)
    ]
    assert "gil_contention" not in ids(diagnose(mixed))


# ---- the straggler's own cause ----


def _quota_ranks(throttled: float) -> list:
    mine = CpuLimit(0.3, 0.3, None, throttled, 0.7, "/tight")
    return [
        rank(100, 0, job_id=DDP, world=3, phases=(("forward", 0.2), ("comm", 0.78))),
        rank(101, 1, job_id=DDP, world=3, phases=(("forward", 0.2), ("comm", 0.78))),
        replace(
            rank(102, 2, job_id=DDP, world=3, phases=(("forward", 0.9), ("comm", 0.08))),
            cpu_limit=mine,
        ),
    ]


def test_a_rank_in_a_tighter_quota_is_the_straggler_with_its_throttling() -> None:
    verdict = diagnose(window(_quota_ranks(1.0), {100: 5.0, 101: 5.0, 102: 95.0}))
    assert verdict.primary.bottleneck == "straggler"
    assert verdict.per_job[0].straggler is not None and verdict.per_job[0].straggler.rank == 2
    texts = [e.text for e in verdict.primary.evidence]
    assert ("its own cause: rank 2's cgroup quota of 0.3 CPU (the other ranks': none) throttled "
            "it in 100 % of its periods") in texts  # fmt: skip
    assert verdict.primary.remedies[0].startswith("raise rank 2's CPU limit to its peers'")
    calm = diagnose(window(_quota_ranks(0.0), {100: 5.0, 101: 5.0, 102: 95.0})).primary
    assert not any("throttled" in e.text for e in calm.evidence)  # a quota that does not bind


def test_a_rank_on_fewer_cpus_is_said_so() -> None:
    ranks = _quota_ranks(0.0)
    ranks[2] = replace(ranks[2], cpu_limit=CpuLimit(1.0, None, (3,), None, None, "/pinned"))
    texts = [
        e.text for e in diagnose(window(ranks, {100: 5.0, 101: 5.0, 102: 95.0})).primary.evidence
    ]
    assert "its own cause: rank 2 may run on 1 CPU (its cpuset), the other ranks on 8" in texts


# ---- ranks waiting for a peer busy elsewhere ----


def test_a_checkpoint_behind_a_barrier_names_the_late_rank_before_the_stall_limit() -> None:
    """Rank 2 works elsewhere (fetch_shard in the fixture) while ranks 0, 1 and 3 wait in the
    collective: 3 s says nothing yet, 7 s names rank 2 and where it is, 11 s is the hang."""

    def ranks(waited: float) -> list:
        return [replace(r, last_step_age_s=waited + 0.5) for r in sf.hung_job(waited)]

    assert pause_of(ranks(3.0)) is None
    snaps = [sf.machine(gpus=0, jobs=tuple(ranks(7.0)), tick=t) for t in (0, 5)]
    verdict = diagnose(snaps)
    found = verdict.primary
    assert found.bottleneck == "straggler" and found.severity == "warning"
    assert found.summary == ("Rank 2 holds back the job: ranks 0-1, 3 wait in all_reduce #1042 "
                             "for it, 7s so far")  # fmt: skip
    assert "rank 2 is in _api_call (client.py) at data.py:41 in fetch_shard" in (
        found.evidence[0].text
    )
    assert "a wait for a busy peer: not the network" in [e.text for e in found.evidence]
    assert "network" not in ids(verdict)
    assert verdict.per_job[0].straggler is not None and verdict.per_job[0].straggler.rank == 2
    late = [sf.machine(gpus=0, jobs=tuple(ranks(11.0)), tick=t) for t in (0, 5)]
    assert diagnose(late).primary.bottleneck == "hang"


def test_a_quota_throttling_one_rank_is_not_the_boxs_cpus_oversubscribed() -> None:
    """A throttled thread stays runnable: the scheduler counts its quota's wait as waiting for
    a CPU.  Rank 2's 1.4 s a second throttled is taken off before the box's demand is summed
    (4.0 CPUs of 2 with it; 2.6 without: no oversubscription)."""
    ranks = _quota_ranks(1.0)
    limit = CpuLimit(0.3, 0.3, None, 1.0, 1.4, "/tight")
    ranks[2] = replace(ranks[2], cpu_limit=limit)
    waits = {100: (60.0, 40.0), 101: (60.0, 40.0), 102: (30.0, 170.0)}
    two_cpus = Scene(gpu_count=0, cpus=2, cpu_busy=100.0, workers=0)
    base = window(ranks, {pid: c for pid, (c, _) in waits.items()}, two_cpus)
    snaps = [_waiting(s, {pid: w for pid, (_, w) in waits.items()}) for s in base]
    verdict = diagnose(snaps)
    assert "oversubscribed" not in ids(verdict)
    assert verdict.primary.bottleneck == "straggler"
    unlimited = [replace(r, cpu_limit=None) for r in ranks]
    again = [replace(s, jobs=tuple(unlimited)) for s in snaps]
    assert "oversubscribed" in ids(diagnose(again))  # the same waits, no quota: the box's


def _waiting(snap: Snapshot, waits: dict[int, float]) -> Snapshot:
    procs = tuple(replace(p, cpu_wait_pct=waits.get(p.pid)) for p in snap.processes)
    return replace(snap, processes=procs)
