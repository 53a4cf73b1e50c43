"""Per-device summaries of a window: one mean, peak or share per metric.

Rules read these instead of raw snapshots so each rule stays a few lines long, and so every rule
agrees on what "the GPU's utilization over the window" means.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass

from collectors.snapshot import (
    DiskSnapshot,
    GpuSnapshot,
    JobSnapshot,
    NicSnapshot,
    ProcessSnapshot,
    Snapshot,
)
from diagnosis.stats import max_of, mean_of, share_true, std_of


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


@dataclass(frozen=True, slots=True)
class ProcView:
    """One process over the window (``cpu_pct``: 100 = one core, as in htop)."""

    pid: int
    name: str
    cpu_pct: float | None
    num_threads: int | None
    read_bytes_per_s: float | None
    # Run-queue wait (collectors.schedstat), window means; 100 = one thread waiting all the time.
    cpu_wait_pct: float | None = None
    threads_busy: float | None = None
    main_cpu_pct: float | None = None
    main_wait_pct: float | None = None


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


def _latest(values: Sequence[float | None]) -> float | None:
    """Thresholds and limits are static-ish: the newest known value is the right one."""
    return next((v for v in reversed(values) if v is not None), None)


def _reason_share(samples: Sequence[GpuSnapshot]) -> dict[int, float]:
    """Share of samples in which each reason bit was set, over samples that report a mask."""
    masks = [g.clocks_event_reasons for g in samples if g.clocks_event_reasons is not None]
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


def gpu_view(samples: Sequence[GpuSnapshot]) -> GpuView:
    """Summarise one GPU's samples (all with the same index, oldest first).

    The fields are read in one pass into columns: a diagnosis runs every tick over the whole
    window, and a generator per field per GPU was most of its cost.
    """
    live = [g for g in samples if not g.lost]
    columns = list(zip(*map(_GPU_FIELDS, live), strict=True)) or [()] * 10
    util, used, total, temp, slowdown, max_operating, power, limit, sm, sm_max = columns
    return GpuView(
        index=samples[-1].index,
        util_pct=mean_of(util),
        util_std=std_of(util),
        mem_used_share=max_of(
            u / t for u, t in zip(used, total, strict=True) if u is not None and t
        ),
        mem_used_bytes=max_of(used),
        mem_total_bytes=_latest(total),
        temp_c=max_of(temp),
        temp_slowdown_c=_latest(slowdown),
        temp_max_operating_c=_latest(max_operating),
        power_w=mean_of(power),
        power_limit_w=_latest(limit),
        sm_clock_mhz=mean_of(sm),
        sm_clock_max_mhz=_latest(sm_max),
        reason_share=_reason_share(live),
        pids=frozenset(p.pid for g in live for p in g.processes if p.kind != "G"),
    )


def proc_view(samples: Sequence[ProcessSnapshot]) -> ProcView:
    """Summarise one process's rows (same pid, oldest first)."""
    last = samples[-1]
    return ProcView(
        pid=last.pid,
        name=last.name,
        cpu_pct=mean_of(p.cpu_pct for p in samples),
        num_threads=last.num_threads,
        read_bytes_per_s=mean_of(p.read_bytes_per_s for p in samples),
        cpu_wait_pct=mean_of(p.cpu_wait_pct for p in samples),
        threads_busy=mean_of(p.threads_busy for p in samples),
        main_cpu_pct=mean_of(p.main_thread_cpu_pct for p in samples),
        main_wait_pct=mean_of(p.main_thread_wait_pct for p in samples),
    )


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


def job_samples(window: Sequence[Snapshot]) -> dict[int, list[JobSnapshot]]:
    """Every summary of each job across the window by pid, oldest first: one pass for all
    ranks (a pass per rank was a third of a 64-rank diagnosis)."""
    samples: dict[int, list[JobSnapshot]] = {}
    for snap in window:
        for job in snap.jobs:
            samples.setdefault(job.pid, []).append(job)
    return samples


def window_step_times(samples: Sequence[JobSnapshot]) -> tuple[float, ...]:
    """Every step time seen across the window, oldest first, each step once.

    One summary holds only its last ``RECENT_STEPS`` steps (about a second for a fast job), so
    a verdict from the newest one alone hinges on whether a checkpoint fell in that second.
    ``steps_total`` says how many of each summary's steps are new since the previous one.
    """
    if not samples:
        return ()
    steps = list(samples[0].recent_step_times_s)
    prev = samples[0].steps_total
    for job in samples[1:]:
        new = job.steps_total - prev
        if new > 0 and job.recent_step_times_s:
            steps.extend(job.recent_step_times_s[-new:])
        prev = job.steps_total
    return tuple(steps)
