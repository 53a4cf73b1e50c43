"""The whole window seen from one rank's side: which GPUs, processes and workers are its own.

The host side (:class:`Box`) is summarised once per :func:`diagnosis.engine.diagnose` call;
:func:`context_for` then gives each rank of each job its :class:`Context`, read by every rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from collectors.snapshot import JobSnapshot, ProcessSnapshot, Snapshot
from diagnosis.demand import CpuDemand, cpu_demand, group_members
from diagnosis.stats import mean_of
from diagnosis.views import (
    DiskView,
    GpuView,
    NicView,
    ProcView,
    disk_view,
    gpu_view,
    group_by,
    job_samples,
    nic_view,
    proc_view,
    window_step_times,
)

# Windows shorter than this are diagnosed with reduced confidence (see ``coverage``).
FULL_WINDOW_S = 10.0
SYSTEM_MODE_FACTOR = 0.7
_NAME = attrgetter("name")
_NIC = attrgetter("name", "netns_inode")  # a job's namespace may have its own "eth0"


@dataclass(frozen=True, slots=True)
class JobView:
    """The focus job: its newest summary plus window means of the shares that drive rules."""

    job: JobSnapshot
    data_wait_share: float | None
    gpu_busy_share: float | None
    step_times_s: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Context:
    """Everything a rule may look at, already reduced to one value per metric."""

    mode: str
    window_s: float
    logical_cpus: int
    local_jobs: int
    cpu_busy_pct: float | None
    core_busy_pct: tuple[float, ...]
    iowait_pct: float | None
    load1: float | None
    swap_bytes_per_s: float | None
    disks: tuple[DiskView, ...]
    nics: tuple[NicView, ...]
    gpus: tuple[GpuView, ...]
    has_gpus: bool
    job: JobView | None
    trainer: ProcView | None
    workers: tuple[ProcView, ...]
    demand: CpuDemand | None

    @property
    def coverage(self) -> float:
        """How much a finding can be trusted from the data's breadth alone: short windows and
        system-only mode (no step timings) both lower it."""
        length = min(1.0, 0.5 + 0.5 * self.window_s / FULL_WINDOW_S)
        return length * (1.0 if self.mode == "attach" else SYSTEM_MODE_FACTOR)

    @property
    def gpu_util_pct(self) -> float | None:
        """Mean utilization of the job's GPUs."""
        return mean_of(g.util_pct for g in self.gpus)

    @property
    def gpu_util_std(self) -> float | None:
        """Largest utilization swing among the job's GPUs: idle gaps show up here first."""
        stds = [g.util_std for g in self.gpus if g.util_std is not None]
        return max(stds) if stds else None


def _job_view(box: Box, job: JobSnapshot) -> JobView:
    samples = box.samples.get(job.pid, [])
    return JobView(
        job=job,
        data_wait_share=mean_of(j.data_wait_share for j in samples),
        gpu_busy_share=mean_of(j.gpu_busy_share for j in samples),
        step_times_s=window_step_times(samples),
    )


def _focus_gpus(
    gpus: list[GpuView], job: JobSnapshot | None, family: set[int]
) -> tuple[GpuView, ...]:
    """The job's GPUs: those its processes hold memory on, else the one at its local rank,
    else (system mode, or NVML cannot see pids in a container) every GPU with a compute
    process, else all of them."""
    mine = [g for g in gpus if g.pids & family]
    if not mine and job is not None:
        mine = [g for g in gpus if g.index == job.local_rank]
    if not mine and job is None:
        mine = [g for g in gpus if g.pids]
    return tuple(mine or gpus)


def _trainer(
    procs: dict[int, ProcView], job: JobSnapshot | None, gpus: tuple[GpuView, ...]
) -> ProcView | None:
    """The training process: the attached job's pid, else the busiest process holding a GPU."""
    if job is not None:
        return procs.get(job.pid)
    holders = [procs[pid] for g in gpus for pid in g.pids if pid in procs]
    return max(holders, key=lambda p: p.cpu_pct or 0.0, default=None)


def _workers(box: Box, trainer: ProcView | None) -> tuple[ProcView, ...]:
    """DataLoader workers: processes the collector grouped under the trainer."""
    if trainer is None:
        return ()
    kids = box.children.get(trainer.pid, ())
    return tuple(box.procs[pid] for pid in kids if pid in box.procs)


def _job_workers(job: JobSnapshot, procs: dict[int, ProcView]) -> tuple[ProcView, ...]:
    """The ring's workers, with their run-queue wait from the process rows where sampled."""
    return tuple(
        ProcView(w.pid, "worker", w.cpu_pct, None, w.read_bytes_per_s, _wait(procs, w.pid))
        for w in job.workers
    )


def _wait(procs: dict[int, ProcView], pid: int) -> float | None:
    seen = procs.get(pid)
    return None if seen is None else seen.cpu_wait_pct


def _core_means(window: Sequence[Snapshot]) -> tuple[float, ...]:
    cores = group_by(window, lambda s: s.cpu.cores if s.cpu else (), lambda c: c.index)
    means = (mean_of(c.busy_pct for c in cores[i]) for i in sorted(cores))
    return tuple(m for m in means if m is not None)


def _swap_rate(window: Sequence[Snapshot]) -> float | None:
    mems = [s.memory for s in window if s.memory is not None]
    rates = [
        (m.swap_in_bytes_per_s or 0.0) + (m.swap_out_bytes_per_s or 0.0)
        for m in mems
        if m.swap_in_bytes_per_s is not None or m.swap_out_bytes_per_s is not None
    ]
    return mean_of(rates)


def _relevant_procs(window: Sequence[Snapshot], gpus: list[GpuView]) -> dict[int, ProcView]:
    """Window summaries of the only processes rules look at: attached trainers, processes on
    a GPU, and their DataLoader workers.  A host runs hundreds of others; skipping them halves
    the cost of a diagnosis."""
    latest = window[-1]
    roots = {j.pid for j in latest.jobs} | {w.pid for j in latest.jobs for w in j.workers}
    roots.update(pid for g in gpus for pid in g.pids)
    wanted = roots | {p.pid for p in latest.processes if p.group_pid in roots}
    rows: dict[int, list[ProcessSnapshot]] = {}
    for snap in window:
        for p in snap.processes:
            if p.pid in wanted:
                rows.setdefault(p.pid, []).append(p)
    return {pid: proc_view(found) for pid, found in rows.items()}


@dataclass(frozen=True, slots=True)
class Box:
    """What every job on the box shares, summarised once per window: with eight ranks and a few
    jobs the engine builds a context per rank, and the host, GPUs and processes are the same."""

    window: tuple[Snapshot, ...]
    gpus: tuple[GpuView, ...]
    procs: dict[int, ProcView]
    logical_cpus: int
    cpu_busy_pct: float | None
    core_busy_pct: tuple[float, ...]
    iowait_pct: float | None
    load1: float | None
    swap_bytes_per_s: float | None
    disks: tuple[DiskView, ...]
    nics: tuple[NicView, ...]
    demand: CpuDemand | None
    samples: dict[int, list[JobSnapshot]]  # each job's summaries across the window, by pid
    children: dict[int, tuple[int, ...]]  # the newest processes by group, the leader left out


def box_of(window: Sequence[Snapshot]) -> Box:
    """Summarise the host side of a chronological, non-empty window once."""
    latest = window[-1]
    cpus = max(1, latest.host.logical_cpus)
    gpus = tuple(
        gpu_view(rows)
        for rows in group_by(window, attrgetter("gpus"), attrgetter("index")).values()
    )
    procs = _relevant_procs(window, list(gpus))
    return Box(
        window=tuple(window),
        gpus=gpus,
        procs=procs,
        logical_cpus=cpus,
        cpu_busy_pct=mean_of(s.cpu.total.busy_pct for s in window if s.cpu),
        core_busy_pct=_core_means(window),
        iowait_pct=mean_of(s.cpu.total.iowait_pct for s in window if s.cpu),
        load1=latest.cpu.load_avg[0] if latest.cpu and latest.cpu.load_avg else None,
        swap_bytes_per_s=_swap_rate(window),
        disks=tuple(disk_view(r) for r in group_by(window, attrgetter("disks"), _NAME).values()),
        nics=tuple(nic_view(r) for r in group_by(window, attrgetter("nics"), _NIC).values()),
        demand=cpu_demand(latest, procs, cpus),
        samples=job_samples(window),
        children=group_members(latest.processes),
    )


def context_for(box: Box, job: JobSnapshot | None) -> Context:
    """The window seen from one rank (``job``), or from the machine when ``job`` is None."""
    family = {job.pid, *(w.pid for w in job.workers)} if job else set()
    focus = _focus_gpus(list(box.gpus), job, family)
    trainer = _trainer(box.procs, job, focus)
    workers = _job_workers(job, box.procs) if job and job.workers else _workers(box, trainer)
    return Context(
        mode="attach" if job is not None else "system",
        window_s=box.window[-1].monotonic - box.window[0].monotonic,
        logical_cpus=box.logical_cpus,
        local_jobs=max(1, len(box.window[-1].jobs)),
        cpu_busy_pct=box.cpu_busy_pct,
        core_busy_pct=box.core_busy_pct,
        iowait_pct=box.iowait_pct,
        load1=box.load1,
        swap_bytes_per_s=box.swap_bytes_per_s,
        disks=box.disks,
        nics=box.nics,
        gpus=focus,
        has_gpus=bool(box.gpus),
        job=_job_view(box, job) if job else None,
        trainer=trainer,
        workers=workers,
        demand=box.demand,
    )
