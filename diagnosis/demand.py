"""How much CPU the attached jobs want, how much they get, and how long they queue for it.

The 1-minute load average lags by a minute and counts every process on the host, so it cannot
tell "these jobs fight over the cores" from "someone else is busy".  The jobs' own processes can.
Each thread is, at any instant, running, runnable but waiting on a run queue, or asleep; the
scheduler counts the first two per thread (``traintop.collectors.schedstat``).  Summed over the
jobs' processes, ``run + wait`` per second of wall time is their demand in CPUs (each thread adds at
most one, so only the jobs' own thread counts can push it above the CPUs), and ``wait / (run +
wait)`` is the share of the time they wanted a CPU and had none: the share of their speed that
contention costs a CPU-bound thread.  Without scheduler statistics (not Linux) only thread counts
and CPU use are known, and ``want_pct`` bounds what the threads could use.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from traintop.collectors.snapshot import JobSnapshot, ProcessSnapshot
from traintop.diagnosis.cpu_pool import pool_of
from traintop.diagnosis.views import ProcView


@dataclass(frozen=True, slots=True)
class TrainerDemand:
    """One training process (a rank) with its DataLoader workers, window means (100 = a CPU)."""

    pid: int
    name: str
    job_id: str
    threads: int  # the trainer's own threads plus its workers'
    workers: int
    cpu_pct: float
    wait_pct: float | None
    busy_threads: float | None = None  # the trainer's threads runnable half the time or more


@dataclass(frozen=True, slots=True)
class CpuDemand:
    """Every attached job's trainers and workers on this box: what they want and what they get.

    A box-level fact: the engine builds one per window and every job's context shares it, so
    its totals are summed once here (every rank's rules read them: 64 x 64 sums otherwise).
    """

    trainers: tuple[TrainerDemand, ...]
    cpus: int
    worker_cpus: float = 0.0  # CPUs the DataLoader workers want, each worker at most one
    runs: int = field(init=False)  # distinct jobs (ranks of one job share a ``job_id``)
    threads: int = field(init=False)
    cpu_pct: float = field(init=False)
    wait_pct: float | None = field(init=False)  # summed run-queue wait; None: none reported
    want_pct: float = field(init=False)  # the most the threads could use: min(threads, cpus) each

    def __post_init__(self) -> None:
        trainers = self.trainers
        waits = [t.wait_pct for t in trainers if t.wait_pct is not None]
        totals = {
            "runs": len({t.job_id or f"pid:{t.pid}" for t in trainers}),
            "threads": sum(t.threads for t in trainers),
            "cpu_pct": sum(t.cpu_pct for t in trainers),
            "wait_pct": sum(waits) if waits else None,
            "want_pct": sum(min(t.threads, self.cpus) * 100.0 for t in trainers),
        }
        for name, value in totals.items():
            object.__setattr__(self, name, value)  # frozen: set once, at construction

    @property
    def jobs(self) -> int:
        """Training processes (ranks) taking part."""
        return len(self.trainers)

    @property
    def got_share(self) -> float:
        """Share of the CPU the jobs could use that they actually got."""
        return self.cpu_pct / self.want_pct if self.want_pct else 1.0

    @property
    def demand_cpus(self) -> float | None:
        """CPUs the jobs' runnable threads asked for on average (run + wait)."""
        wait = self.wait_pct
        return None if wait is None else (self.cpu_pct + wait) / 100.0

    @property
    def wait_share(self) -> float | None:
        """Share of the time the jobs' threads wanted a CPU and waited for one."""
        wait = self.wait_pct
        runnable = self.cpu_pct + (wait or 0.0)
        return None if wait is None or runnable <= 0.0 else wait / runnable

    @property
    def threads_per_trainer(self) -> int:
        """``torch.set_num_threads`` / ``OMP_NUM_THREADS`` for each trainer on this box: the
        CPUs left once the DataLoader workers have theirs, shared among the running trainers."""
        spare = self.cpus - math.ceil(self.worker_cpus - 1e-9)
        return max(1, spare // max(1, self.jobs))


def _runnable_cpus(view: ProcView) -> float:
    """CPUs one single-threaded process wants: its run plus wait, at most one."""
    return min(1.0, ((view.cpu_pct or 0.0) + (view.cpu_wait_pct or 0.0)) / 100.0)


def group_members(processes: Sequence[ProcessSnapshot]) -> dict[int, tuple[int, ...]]:
    """The pids the collector grouped under each leader (the leader left out), sorted: one
    pass over the processes for every job, not one per job."""
    groups: dict[int, list[int]] = {}
    for proc in processes:
        if proc.group_pid is not None and proc.group_pid != proc.pid:
            groups.setdefault(proc.group_pid, []).append(proc.pid)
    return {leader: tuple(sorted(pids)) for leader, pids in groups.items()}


def _members(job: JobSnapshot, grouped: dict[int, tuple[int, ...]]) -> list[int]:
    """The job's DataLoader workers: those its ring names and those the collector grouped."""
    return sorted({w.pid for w in job.workers}.union(grouped.get(job.pid, ())))


def _trainer(
    job: JobSnapshot, views: list[ProcView], workers: int, sharers: int = 1
) -> TrainerDemand:
    waits = [v.cpu_wait_pct for v in views if v.cpu_wait_pct is not None]
    return TrainerDemand(
        pid=job.pid,
        name=job.name,
        job_id=job.job_id,
        threads=sum(v.num_threads or 0 for v in views),
        workers=workers,
        cpu_pct=sum(v.cpu_pct or 0.0 for v in views),
        wait_pct=_unthrottled(sum(waits), job, sharers) if waits else None,
        busy_threads=views[0].threads_busy,
    )


def _unthrottled(wait_pct: float, job: JobSnapshot, sharers: int) -> float:
    """The run-queue wait less the time its cgroup's quota held it: a throttled thread stays
    runnable, so the scheduler counts the throttle as waiting for a CPU, but it waits for its
    quota's next period, not for the box's cores (a rank in 0.3 CPU of quota wanted 0.7 CPU
    more than it got on a quiet box, and read oversubscribed).  The group's throttled time is
    shared among the ranks in it (``sharers``)."""
    limit = job.cpu_limit
    held = limit.throttled_s_per_s if limit is not None else None
    return max(0.0, wait_pct - 100.0 * held / sharers) if held else wait_pct


def cpu_demand(
    jobs: Sequence[JobSnapshot],
    grouped: dict[int, tuple[int, ...]],
    procs: dict[int, ProcView],
    cpus: int,
) -> CpuDemand | None:
    """What the attached jobs' trainers and workers want and get (``grouped``: the newest
    processes by leader, :func:`group_members`); ``None`` without thread counts (no process of
    theirs was sampled)."""
    trainers, worker_cpus = [], 0.0
    pools = Counter(pool_of(job) for job in jobs)
    for job in jobs:
        main = procs.get(job.pid)
        if main is None or not main.num_threads:
            continue
        workers = [procs[pid] for pid in _members(job, grouped) if pid in procs]
        trainers.append(_trainer(job, [main, *workers], len(workers), pools[pool_of(job)]))
        worker_cpus += sum(map(_runnable_cpus, workers))
    return CpuDemand(tuple(trainers), cpus, worker_cpus) if trainers else None
