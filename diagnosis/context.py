"""The whole window seen from one rank's side: which GPUs, processes and workers are its own.

The host side (:class:`Box`) is summarised once per :func:`traintop.diagnosis.engine.diagnose` call,
from the window's tracks (:mod:`traintop.diagnosis.memo`: each process, GPU and job summary's values
across the window, moved on from the last tick's); :func:`context_for` then gives each rank of
each job its :class:`Context`, which holds the box and adds what is the rank's own.  Rules read
both: ``ctx.box.cpu_busy_pct`` is about the host, ``ctx.trainer`` about the rank.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, TypeVar, cast

from traintop.collectors.snapshot import JobSnapshot, Snapshot
from traintop.diagnosis.budget import Budget, budget_of
from traintop.diagnosis.cpu_pool import pool_of
from traintop.diagnosis.demand import CpuDemand, cpu_demand, group_members
from traintop.diagnosis.host_view import HostView, host_view
from traintop.diagnosis.memo import Track, Window
from traintop.diagnosis.model import Candidate
from traintop.diagnosis.stats import mean_of
from traintop.diagnosis.views import (
    CORES,
    GPUS,
    JOBS,
    PROCS,
    DiskView,
    GpuView,
    NicView,
    ProcView,
    Steps,
    comm_share_of,
    disk_view,
    gpu_view,
    group_by,
    nic_view,
    proc_view,
)

# Windows shorter than this are diagnosed with reduced confidence (see ``coverage``).
FULL_WINDOW_S = 10.0
SYSTEM_MODE_FACTOR = 0.7
T = TypeVar("T")
_NAME = attrgetter("name")
_NIC = attrgetter("name", "netns_inode")  # a job's namespace may have its own "eth0"


@dataclass(frozen=True, slots=True)
class JobView:
    """The focus job: its newest summary plus window means of the shares that drive rules."""

    job: JobSnapshot
    data_wait_share: float | None
    gpu_busy_share: float | None
    steps: Steps  # every step time of the window
    comm: tuple[float, str] | None  # share of the step in communication phases, their names
    waits: Sequence[float | None] = ()  # the data wait share of each summary in the window
    budget: Budget | None = None  # where its time went (traintop.diagnosis.budget)
    # The CUDA-event span: time with work queued on the GPU, an upper bound of busy that the
    # card's counters (``gpu_busy_share``) correct; shown only as "queued".
    gpu_queued_share: float | None = None


@dataclass(frozen=True, slots=True)
class Context:
    """Everything a rule may look at, already reduced to one value per metric: the box every
    rank shares, and what of it is this rank's own."""

    box: Box
    mode: str
    gpus: tuple[GpuView, ...]
    gpu_util_pct: float | None  # mean utilization of the job's GPUs
    gpu_util_std: float | None  # largest utilization swing among them: idle gaps show here first
    job: JobView | None
    trainer: ProcView | None
    workers: tuple[ProcView, ...]
    # What several rules derive alike from this rank's figures (its busy share, the CPUs it may
    # use, why its GPU idles), made once per rank and diagnosis (:func:`once`).
    derived: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def coverage(self) -> float:
        """How much a finding can be trusted from the data's breadth alone: short windows and
        system-only mode (no step timings) both lower it."""
        return self.box.span_trust * (1.0 if self.mode == "attach" else SYSTEM_MODE_FACTOR)


def once(ctx: Context, key: str, make: Callable[[Context], T]) -> T:
    """``make(ctx)``, made on the first call for this rank's context and kept with it."""
    if key not in ctx.derived:
        ctx.derived[key] = make(ctx)
    return ctx.derived[key]


def _job_view(box: Box, job: JobSnapshot) -> JobView:
    track = box.samples[job.pid]
    wait, busy, tails, lows, highs, phases, queued = track.columns
    steps = Steps(track.rows, tails, lows, highs, phases)
    return JobView(
        job=job,
        data_wait_share=mean_of(wait),
        gpu_busy_share=mean_of(busy),
        steps=steps,
        comm=comm_share_of(job),
        waits=wait,
        budget=budget_of(job.phases, steps),
        gpu_queued_share=mean_of(queued),
    )


def _focus_gpus(
    gpus: tuple[GpuView, ...], job: JobSnapshot | None, family: set[int]
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
    """The ring's workers, summarised over the window from their process rows where sampled
    (the ring's figures are one tick's: a worker blocked on storage reads in bursts, 4 MB/s
    on one tick and nothing on the next), else as the ring has them."""
    return tuple(
        procs.get(w.pid) or ProcView(w.pid, "worker", w.cpu_pct, None, w.read_bytes_per_s)
        for w in job.workers
    )


def _core_means(window: Window) -> tuple[float, ...]:
    cores = cast("list[int]", window.keys(CORES))  # the cores' tracks are keyed by core index
    means = (mean_of(window.track(CORES, i).columns[0]) for i in sorted(cores))
    return tuple(m for m in means if m is not None)


def _swap_rate(window: Sequence[Snapshot]) -> float | None:
    mems = [s.memory for s in window if s.memory is not None]
    rates = [
        (m.swap_in_bytes_per_s or 0.0) + (m.swap_out_bytes_per_s or 0.0)
        for m in mems
        if m.swap_in_bytes_per_s is not None or m.swap_out_bytes_per_s is not None
    ]
    return mean_of(rates)


def _members(snap: Snapshot) -> dict[int, tuple[int, ...]]:
    return group_members(snap.processes)


def _relevant_procs(
    window: Window, jobs: Sequence[JobSnapshot], gpus: Sequence[GpuView]
) -> dict[int, ProcView]:
    """Window summaries of the only processes rules look at: the attached trainers
    (``jobs``), processes on a GPU, and their DataLoader workers.  A host runs hundreds of
    others; skipping them halves the cost of a diagnosis."""
    roots = {j.pid for j in jobs} | {w.pid for j in jobs for w in j.workers}
    roots.update(pid for g in gpus for pid in g.pids)
    members = window.latest.of(_members)
    wanted = roots.union(*(members.get(pid, ()) for pid in roots))
    tracks = ((pid, window.track(PROCS, pid)) for pid in wanted)
    return {pid: proc_view(track) for pid, track in tracks if track.rows}


@dataclass(frozen=True, slots=True)
class RankResult:
    """One rank of a job: its newest summary, its context and its findings, worst first."""

    job: JobSnapshot
    ctx: Context
    found: tuple[Candidate, ...]


@dataclass(frozen=True, slots=True)
class Box:
    """What every job on the box shares, summarised once per window: with eight ranks and a few
    jobs the engine builds a context per rank, and the host, GPUs and processes are the same."""

    window_s: float
    logical_cpus: int
    local_jobs: int  # training processes (ranks) judged on the box
    cpu_busy_pct: float | None
    core_busy_pct: tuple[float, ...]
    iowait_pct: float | None
    load1: float | None
    swap_bytes_per_s: float | None
    disks: tuple[DiskView, ...]
    nics: tuple[NicView, ...]
    gpus: tuple[GpuView, ...]
    procs: dict[int, ProcView]
    demand: CpuDemand | None
    samples: dict[int, Track]  # each judged rank's summaries across the window, by pid
    children: dict[int, tuple[int, ...]]  # the newest processes by group, the leader left out
    # Ranks judged on the box by the CPUs they share: a limited cgroup's path (its quota or
    # cpuset), "" for the host's CPUs (traintop.diagnosis.job_cpus)
    pools: dict[str, int] = field(default_factory=dict)
    host: HostView | None = None  # RAM, its trend, swap-in and PSI (traintop.diagnosis.host_view)

    @property
    def has_gpus(self) -> bool:
        return bool(self.gpus)

    @property
    def span_trust(self) -> float:
        return span_trust(self.window_s)


def span_trust(window_s: float) -> float:
    """How far a window's length lets a finding be trusted (0.5 to 1): the only way the
    length reaches a verdict."""
    return min(1.0, 0.5 + 0.5 * window_s / FULL_WINDOW_S)


def box_of(window: Window, jobs: Sequence[JobSnapshot]) -> Box:
    """Summarise the host side of a chronological, non-empty window once, for the ranks
    ``jobs`` of its newest snapshot that are judged on it (ended runs are left out of the
    box-wide numbers: threads, CPU demand, the jobs sharing the CPUs)."""
    snaps = window.snaps
    latest = snaps[-1]
    cpus = max(1, latest.host.logical_cpus)
    gpus = tuple(gpu_view(window.track(GPUS, i)) for i in window.keys(GPUS))
    procs = _relevant_procs(window, jobs, gpus)
    members = window.latest.of(_members)
    return Box(
        window_s=latest.monotonic - snaps[0].monotonic,
        logical_cpus=cpus,
        local_jobs=max(1, len(jobs)),
        cpu_busy_pct=mean_of(s.cpu.total.busy_pct for s in snaps if s.cpu),
        core_busy_pct=_core_means(window),
        iowait_pct=mean_of(s.cpu.total.iowait_pct for s in snaps if s.cpu),
        load1=latest.cpu.load_avg[0] if latest.cpu and latest.cpu.load_avg else None,
        swap_bytes_per_s=_swap_rate(snaps),
        disks=tuple(disk_view(r) for r in group_by(snaps, attrgetter("disks"), _NAME).values()),
        nics=tuple(nic_view(r) for r in group_by(snaps, attrgetter("nics"), _NIC).values()),
        gpus=gpus,
        procs=procs,
        demand=cpu_demand(jobs, members, procs, cpus),
        samples={j.pid: window.track(JOBS, j.pid) for j in jobs},
        children=members,
        pools=dict(Counter(pool_of(j) for j in jobs)),
        host=host_view(snaps),
    )


def context_for(box: Box, job: JobSnapshot | None) -> Context:
    """The window seen from one rank (``job``), or from the machine when ``job`` is None."""
    family = {job.pid, *(w.pid for w in job.workers)} if job else set()
    focus = _focus_gpus(box.gpus, job, family)
    trainer = _trainer(box.procs, job, focus)
    workers = _job_workers(job, box.procs) if job and job.workers else _workers(box, trainer)
    stds = [g.util_std for g in focus if g.util_std is not None]
    return Context(
        box=box,
        mode="attach" if job is not None else "system",
        gpus=focus,
        gpu_util_pct=mean_of(g.util_pct for g in focus),
        gpu_util_std=max(stds) if stds else None,
        job=_job_view(box, job) if job else None,
        trainer=trainer,
        workers=workers,
    )
