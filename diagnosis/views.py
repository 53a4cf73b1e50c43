"""Per-device summaries of a window: one mean, peak or share per metric.

Rules read these instead of raw snapshots so each rule stays a few lines long, and so every rule
agrees on what "the GPU's utilization over the window" means.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TypeVar

from traintop.collectors.phase_names import is_comm_phase
from traintop.collectors.snapshot import (
    DiskSnapshot,
    GpuSnapshot,
    JobSnapshot,
    NicSnapshot,
    PhaseShare,
    ProcessSnapshot,
    Snapshot,
)
from traintop.diagnosis.memo import Kind, Track
from traintop.diagnosis.stats import max_of, mean_of, present, share_true, std_of


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU over the window; ``reason_share`` maps an NVML reason bit to its active share."""

    index: int
    util_pct: float | None
    util_std: float | None
    mem_used_share: float | None
    mem_used_bytes: int | None  # peak over the window
    mem_total_bytes: int | None
    temp_c: float | None
    temp_slowdown_c: float | None
    temp_max_operating_c: float | None
    power_w: float | None
    power_limit_w: float | None
    sm_clock_mhz: float | None
    sm_clock_max_mhz: float | None
    reason_share: dict[int, float]
    pids: frozenset[int]
    # The card's own counters beyond utilization (window means, percent): GPM on Hopper and
    # newer, None elsewhere.
    sm_active_pct: float | None = None
    sm_occupancy_pct: float | None = None
    tensor_active_pct: float | None = None
    dram_active_pct: float | None = None


@dataclass(frozen=True, slots=True)
class ProcView:
    """One process over the window (``cpu_pct``: 100 = one core, as in htop)."""

    pid: int
    name: str
    cpu_pct: float | None
    num_threads: int | None
    read_bytes_per_s: float | None
    # Run-queue wait (traintop.collectors.schedstat), window means; 100 = one thread waiting all the
    # time.
    cpu_wait_pct: float | None = None
    threads_busy: float | None = None
    main_cpu_pct: float | None = None
    main_wait_pct: float | None = None
    # Share of the window's samples in which its main thread was in uninterruptible sleep (D):
    # blocked on a read (or another kernel wait), neither computing nor sleeping by choice.
    blocked_share: float | None = None
    # Its other threads' window means where they were read one by one: (tid, on a CPU %,
    # waiting for one %), busiest first; a tick that did not list a thread counts as idle.
    threads: tuple[tuple[int, float, float], ...] = ()


@dataclass(frozen=True, slots=True)
class DiskView:
    """One block device over the window."""

    name: str
    read_bytes_per_s: float | None
    busy_pct: float | None
    await_ms: float | None


@dataclass(frozen=True, slots=True)
class NicView:
    """One network interface over the window."""

    name: str
    speed_mbps: int | None
    rx_bytes_per_s: float | None
    tx_bytes_per_s: float | None
    link_util_pct: float | None
    job: str | None = None  # set for an interface of a job's own network namespace
    job_ids: tuple[str, ...] = ()


T = TypeVar("T")


def _latest(values: Sequence[T | None]) -> T | None:
    """Thresholds and limits are static-ish: the newest known value is the right one."""
    return next((v for v in reversed(values) if v is not None), None)


def _reason_share(masks: Sequence[int]) -> dict[int, float]:
    """Share of samples in which each reason bit was set, over samples that report a mask."""
    seen = functools.reduce(operator.or_, masks, 0)
    bits = [1 << i for i in range(16) if seen >> i & 1]
    return {bit: share_true(bool(m & bit) for m in masks) for bit in bits}


_GPU_FIELDS = operator.attrgetter(
    "util_gpu_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "temp_c",
    "temp_slowdown_c",
    "temp_max_operating_c",
    "power_w",
    "power_limit_w",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
)
_GPM_FIELDS = operator.attrgetter(
    "util_gpu_mean_pct", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct"
)
_LOST_GPU = (None,) * 12 + ((), *(None,) * 5)  # a lost GPU's row reads as nothing measured


def _read_gpu(prev: GpuSnapshot | None, g: GpuSnapshot) -> tuple:
    """One GPU row: its fields, memory used as a share, reason mask, compute pids, the driver's
    mean utilization and the GPM counters."""
    if g.lost:
        return _LOST_GPU
    used, total = g.mem_used_bytes, g.mem_total_bytes
    share = used / total if used is not None and total else None
    pids = tuple(p.pid for p in g.processes if p.kind != "G")
    return (*_GPU_FIELDS(g), share, g.clocks_event_reasons, pids, *_GPM_FIELDS(g))


GPUS = Kind(operator.attrgetter("gpus"), operator.attrgetter("index"), _read_gpu, 18)


def gpu_view(track: Track) -> GpuView:
    """Summarise one GPU's rows across the window (a :data:`GPUS` track): read once per row
    into columns, as a diagnosis summarises every GPU on every tick."""
    columns = track.columns
    util, used, total, temp, slowdown, max_operating, power, limit, sm, sm_max = columns[:10]
    share, masks, pids, util_mean, active, occupancy, tensor, dram = columns[10:]
    return GpuView(
        index=track.rows[-1].index,
        util_pct=_util_level(util, util_mean),
        util_std=std_of(util),
        mem_used_share=max_of(share),
        mem_used_bytes=max_of(used),
        mem_total_bytes=_latest(total),
        temp_c=max_of(temp),
        temp_slowdown_c=_latest(slowdown),
        temp_max_operating_c=_latest(max_operating),
        power_w=mean_of(power),
        power_limit_w=_latest(limit),
        sm_clock_mhz=mean_of(sm),
        sm_clock_max_mhz=_latest(sm_max),
        reason_share=_reason_share(present(masks)),
        pids=frozenset(chain.from_iterable(pids)),
        sm_active_pct=mean_of(active),
        sm_occupancy_pct=mean_of(occupancy),
        tensor_active_pct=mean_of(tensor),
        dram_active_pct=mean_of(dram),
    )


def _util_level(readings: Sequence[float | None], means: Sequence[float | None]) -> float | None:
    """The GPU's utilization over the window: the mean of the driver's samples between ticks
    where it gives them (a whole interval, not its last sample period), else of the readings.
    The readings' swing (``util_std``) still comes from the readings: the means smooth it."""
    level = mean_of(means)
    return level if level is not None else mean_of(readings)


_PROC_FIELDS = operator.attrgetter(
    "cpu_pct",
    "read_bytes_per_s",
    "cpu_wait_pct",
    "threads_busy",
    "main_thread_cpu_pct",
    "main_thread_wait_pct",
    "state",
)
PROCS = Kind(
    operator.attrgetter("processes"), operator.attrgetter("pid"), lambda _, p: _PROC_FIELDS(p), 7
)


def proc_view(track: Track) -> ProcView:
    """Summarise one process's rows across the window (a :data:`PROCS` track, not empty):
    every rank brings a trainer and its workers, each summarised on every tick."""
    last = track.rows[-1]
    cpu, read, wait, busy, main_cpu, main_wait, states = track.columns
    return ProcView(
        pid=last.pid,
        name=last.name,
        cpu_pct=mean_of(cpu),
        num_threads=last.num_threads,
        read_bytes_per_s=mean_of(read),
        cpu_wait_pct=mean_of(wait),
        threads_busy=mean_of(busy),
        main_cpu_pct=mean_of(main_cpu),
        main_wait_pct=mean_of(main_wait),
        blocked_share=_blocked_share(states),
        threads=_thread_means(track.rows),
    )


def _thread_means(rows: Sequence[ProcessSnapshot]) -> tuple[tuple[int, float, float], ...]:
    """Each listed thread's CPU and wait over the window's rows (absent from a row: idle)."""
    if not rows or not any(r.thread_cpu for r in rows):
        return ()
    run: dict[int, float] = {}
    wait: dict[int, float] = {}
    for row in rows:
        for t in row.thread_cpu:
            run[t.tid] = run.get(t.tid, 0.0) + t.cpu_pct
            wait[t.tid] = wait.get(t.tid, 0.0) + (t.wait_pct or 0.0)
    n = len(rows)
    means = ((tid, run[tid] / n, wait[tid] / n) for tid in run)
    return tuple(sorted(means, key=lambda t: -t[1]))


def _blocked_share(states: Sequence[str | None]) -> float | None:
    """Share of the samples that read the state letter ``D`` (None: no state was read)."""
    read = present(states)
    return share_true(s == "D" for s in read) if read else None


CORES = Kind(
    lambda snap: snap.cpu.cores if snap.cpu else (),
    operator.attrgetter("index"),
    lambda _, core: (core.busy_pct,),
    1,
)


def step_tail(prev: JobSnapshot, job: JobSnapshot) -> tuple[float, ...]:
    """The step times ``job``'s summary adds to ``prev``'s: ``steps_total`` says how many of its
    recent ones are new (a restarted count adds none)."""
    new = job.steps_total - prev.steps_total
    return job.recent_step_times_s[-new:] if new > 0 else ()


def phase_tail(prev: JobSnapshot, job: JobSnapshot) -> tuple[tuple[float, ...], ...]:
    """The per-phase columns of the steps :func:`step_tail` gives."""
    new = job.steps_total - prev.steps_total
    return tuple(column[-new:] for column in job.recent_phase_times_s) if new > 0 else ()


def _read_job(prev: JobSnapshot | None, job: JobSnapshot) -> tuple:
    """One summary: its shares, the steps it adds to the one before, their bounds and their
    split by phase (the first summary's are never read: it gives all of its steps,
    :func:`window_step_times`)."""
    tail = step_tail(prev, job) if prev is not None else ()
    low, high = (min(tail), max(tail)) if tail else (None, None)
    phases = phase_tail(prev, job) if prev is not None and tail else ()
    return job.data_wait_share, job.gpu_busy_share, tail, low, high, phases, job.gpu_queued_share


JOBS = Kind(operator.attrgetter("jobs"), operator.attrgetter("pid"), _read_job, 7)


@dataclass(frozen=True, slots=True)
class Steps:
    """Every step time of the window (:func:`window_step_times`) from one job's :data:`JOBS`
    track.  A rule asks for their count and bounds on every tick, which come from what was
    read once per summary; the times are only joined when it asks for them (a window holds
    600 steps of a rank at 20 steps/s, and 64 ranks are judged on every tick)."""

    rows: Sequence[JobSnapshot]
    tails: Sequence[tuple[float, ...]]
    lows: Sequence[float | None]
    highs: Sequence[float | None]
    phase_tails: Sequence[tuple[tuple[float, ...], ...]] = ()

    @property
    def times(self) -> tuple[float, ...]:
        return window_step_times(self.rows, self.tails)

    @property
    def phase_times(self) -> tuple[tuple[float, ...], ...] | None:
        """Every step of :attr:`times` split by phase, one column per phase of the newest
        summary; ``None`` where a summary carries no split (older writers, recordings)."""
        if not self.rows:
            return None
        first = self.rows[0].recent_phase_times_s
        width = len(self.rows[-1].recent_phase_times_s)
        tails = [t for t, n in zip(self.phase_tails[1:], self.tails[1:], strict=False) if n]
        if not width or len(first) != width or any(len(t) != width for t in tails):
            return None
        return tuple(tuple(chain(first[i], *(t[i] for t in tails))) for i in range(width))

    @property
    def count(self) -> int:
        head = self.rows[0].recent_step_times_s if self.rows else ()
        return len(head) + sum(map(len, self.tails[1:]))

    @property
    def shortest(self) -> float:
        """The shortest step (ask only when ``count`` is not 0)."""
        return min(chain(self.rows[0].recent_step_times_s, present(self.lows[1:])))

    @property
    def longest(self) -> float:
        return max(chain(self.rows[0].recent_step_times_s, present(self.highs[1:])))


def disk_view(samples: Sequence[DiskSnapshot]) -> DiskView:
    """Summarise one block device's samples."""
    return DiskView(
        name=samples[-1].name,
        read_bytes_per_s=mean_of(d.read_bytes_per_s for d in samples),
        busy_pct=mean_of(d.busy_pct for d in samples),
        await_ms=mean_of(d.await_ms for d in samples),
    )


def nic_view(samples: Sequence[NicSnapshot]) -> NicView:
    """Summarise one interface's samples."""
    return NicView(
        name=samples[-1].name,
        speed_mbps=samples[-1].speed_mbps,
        rx_bytes_per_s=mean_of(n.rx_bytes_per_s for n in samples),
        tx_bytes_per_s=mean_of(n.tx_bytes_per_s for n in samples),
        link_util_pct=mean_of(n.link_util_pct for n in samples),
        job=samples[-1].job,
        job_ids=samples[-1].job_ids,
    )


def group_by(window: Sequence[Snapshot], rows, key) -> dict:
    """Collect ``rows(snapshot)`` items across the window into lists keyed by ``key(item)``."""
    groups: dict = {}
    for snap in window:
        for item in rows(snap):
            groups.setdefault(key(item), []).append(item)
    return groups


def window_step_times(
    samples: Sequence[JobSnapshot], tails: Sequence[tuple[float, ...]] | None = None
) -> tuple[float, ...]:
    """Every step time seen across the window, oldest first, each step once.

    One summary holds only its last ``RECENT_STEPS`` steps (about a second for a fast job), so
    a verdict from the newest one alone hinges on whether a checkpoint fell in that second.
    The first summary gives all of its steps, each later one its :func:`step_tail` (``tails``,
    where already read: a :data:`JOBS` track's third column).
    """
    if not samples:
        return ()
    if tails is None:
        tails = [(), *map(step_tail, samples, samples[1:])]
    return tuple(chain(samples[0].recent_step_times_s, *tails[1:]))


def comm_phases(job: JobSnapshot) -> list[PhaseShare]:
    """The job's phases named like communication (the verdict and the exporter agree)."""
    return [p for p in job.phases if is_comm_phase(p.name)]


def comm_share_of(job: JobSnapshot) -> tuple[float, str] | None:
    """Summed share of the step spent in phases named like communication, and their names."""
    comm = comm_phases(job)
    if not comm:
        return None
    return sum(p.share for p in comm), "+".join(p.name for p in comm)
