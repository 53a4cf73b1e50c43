"""The wait for data, split by what the loaders did meanwhile: computing, reading, or neither.

While a job waits for its next batch, the processes that make batches (the DataLoader workers,
else the trainer itself) are at every instant on a CPU or queued for one, blocked in the kernel
on a read (state ``D``), or asleep by choice (a fixed fetch latency, a lock, too few of them
asked for work).  The kernel measures the first (CPU time and run-queue wait, per thread), the
collector samples the second (the state letter, once a tick), and the rest is the third.  The
wait is split in those proportions: ``data_cpu`` claims the computing part, ``data_io`` the
reading part and ``data_starved`` the rest, so two rules never claim the same wait and the one
that explains most of it leads.  Before the split, the handoff's own part of the wait is taken
out (``data_handoff``: the trainer's CPU unpickling each worker's batch, which the probe times,
and the worker's CPU serving its tensors' shared memory): no worker's state explains it, and
no count of workers shortens it.  A threshold no longer decides which of them "holds": a loader
blocked on a throttled disk 90 % of the time reads ``data_io`` on every run, whatever iowait the
other processes on the box leave visible.

A loader in ``D`` counts as reading only while the job reads (``read_traffic``): a trainer
blocked in a checkpoint's ``fsync`` is in ``D`` too, writing.  Where no state was sampled (no
procfs), the old witnesses stand in: reads with storage pressure, or loaders that read while
barely using a CPU, make the time off-CPU storage time.  Where run-queue wait is not measured, a
saturated host with loaders busy enough to want more (the crowded case) makes it CPU time.
A trainer that loads its own batches (``num_workers=0``) computes outside the data phase too:
only the CPU beyond what its other phases take counts as loading.
"""

from __future__ import annotations

from dataclasses import dataclass

from traintop.diagnosis.context import Context, once
from traintop.diagnosis.signals import (
    LOADER_CROWDED_PCT,
    cpu_saturated,
    data_wait,
    io_bound,
    loader_cpu_pct,
    loaders,
    read_traffic,
    runnable_pct,
)
from traintop.diagnosis.stats import clamp01, mean_of
from traintop.diagnosis.views import ProcView

NOISE = 0.1  # a part of the loaders' time this small is sampling error, not a second cause


@dataclass(frozen=True, slots=True)
class DataSplit:
    """The data wait (share of time) and its parts, which add up to it."""

    wait: float
    cpu: float  # the loaders on a CPU or queued for one
    io: float  # the loaders blocked reading
    starved: float  # the loaders neither: asleep, or too few of them
    handoff: float = 0.0  # the trainer taking the workers' batches in, as the probe timed it

    def part(self, name: str) -> float:
        """The share of time claimed by ``data_cpu``, ``data_io``, ``data_starved`` or
        ``data_handoff``."""
        parts = {"data_cpu": self.cpu, "data_io": self.io, "data_starved": self.starved}
        return self.handoff if name == "data_handoff" else parts[name]


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the box shows about every loader alike, read once per rank."""

    reads: bool  # the job reads from storage
    crowded: bool  # a saturated host, loaders busy enough to be short of CPU
    storage: bool  # storage visibly limits the reads (without sampled states)


@dataclass(frozen=True, slots=True)
class _Time:
    """Where one loader's time went over the window, as shares adding up to at most 1."""

    cpu: float
    blocked: float


def data_split(ctx: Context) -> DataSplit | None:
    """The split of this rank's data wait (None: no data wait measured).  With no loader in
    sight (an ended run judged on its step records alone) nothing says it computed or read:
    the wait is all ``starved``, as the evidence can back.  Made once a rank: each data rule
    that claims a part reads it, and the loader model."""
    return once(ctx, "data_split", _data_split)


def _data_split(ctx: Context) -> DataSplit | None:
    wait = data_wait(ctx)
    if wait is None:
        return None
    procs = loaders(ctx)
    inline = not ctx.workers
    seen = _Seen(bool(read_traffic(ctx)), _crowded(ctx), io_bound(ctx) != ())
    times = [_time_of(seen, p, wait if inline else None) for p in procs]
    cpu = mean_of(t.cpu for t in times) or 0.0
    blocked = mean_of(t.blocked for t in times) or 0.0
    parts = _folded({"cpu": cpu, "io": blocked, "starved": max(0.0, 1.0 - cpu - blocked)})
    handoff = 0.0 if inline else handoff_share(ctx, wait)
    rest = wait - handoff
    return DataSplit(wait, **{name: rest * part for name, part in parts.items()}, handoff=handoff)


def handoff_share(ctx: Context, wait: float) -> float:
    """The share of the time the trainer spent taking its workers' batches in (its own part
    of the handoff, per batch, at the batches' rate), within its wait: the rest is the wait
    for them."""
    job = ctx.job.job if ctx.job is not None else None
    rate = (job.batches_per_s or job.steps_per_s) if job is not None else None
    own = handoff_own_s(ctx)
    return min(wait, own * rate) if own is not None and rate else 0.0


def handoff_own_s(ctx: Context) -> float | None:
    """Seconds a batch's handoff costs whatever the workers do: the trainer's CPU in it (the
    probe's thread clock) and the worker's in serving it (its threads but the main one: the
    queue's feeder, torch's resource sharer), never more than the handoff took.  The rest of
    it is the wait for a busy worker's GIL (its Python making the next batch keeps it for up
    to the switch interval): the worker's time, which more workers, each busy less, shorten."""
    job = ctx.job.job if ctx.job is not None else None
    if job is None or job.handoff_s is None:
        return None
    rate = job.batches_per_s or job.steps_per_s
    cpu = job.handoff_s if job.handoff_cpu_s is None else job.handoff_cpu_s
    return min(job.handoff_s, cpu + (serve_s(ctx, rate) if rate else 0.0))


def serve_s(ctx: Context, rate: float) -> float:
    """CPU seconds a batch's worker spent outside its main thread: the queue's feeder thread
    pickling the batch, torch's resource sharer answering the trainer for each tensor (the
    handoff's other side).  In Python, they hold the worker's GIL meanwhile: its main thread,
    making the next batch, waits for them as long."""
    procs = [w for w in ctx.workers if w.cpu_pct is not None and w.main_cpu_pct is not None]
    return sum(max(0.0, w.cpu_pct - w.main_cpu_pct) for w in procs) / 100.0 / rate  # type: ignore[operator]


def _folded(parts: dict[str, float]) -> dict[str, float]:
    """Parts under ``NOISE`` of the loaders' time go to the largest: a worker at 98 % CPU is
    CPU-bound, not 2 % starved (one tick's sampling error), and the claims add up to the wait
    with the causes that are named."""
    largest = max(parts, key=parts.__getitem__)
    small = [name for name, part in parts.items() if part < NOISE and name != largest]
    folded = {name: 0.0 if name in small else part for name, part in parts.items()}
    folded[largest] += sum(parts[name] for name in small)
    return folded


def _time_of(seen: _Seen, proc: ProcView, inline_wait: float | None) -> _Time:
    """One loader's shares; ``inline_wait`` is the data wait when it is the trainer."""
    cpu = _cpu_share(seen, proc)
    if inline_wait is not None:  # the trainer: its other phases use the CPU it has beyond this
        cpu = clamp01((cpu - (1.0 - inline_wait)) / inline_wait) if inline_wait > 0 else 0.0
    blocked = _blocked_share(seen, proc, inline_wait)
    return _Time(cpu, min(blocked, 1.0 - cpu))


def _cpu_share(seen: _Seen, proc: ProcView) -> float:
    """Share of the time a loader ran or was runnable: its main thread where measured alone
    (a trainer's other threads are not its loading), else the process (a worker is one)."""
    if proc.main_cpu_pct is not None:
        return clamp01((proc.main_cpu_pct + (proc.main_wait_pct or 0.0)) / 100.0)
    run = runnable_pct(proc)
    if run is None:
        return 0.0
    if proc.cpu_wait_pct is None and seen.crowded:
        return 1.0  # queueing unmeasured, on a host too full to give it more: CPU-bound
    return clamp01(run / 100.0)


def _crowded(ctx: Context) -> bool:
    """The host is saturated and the loaders use enough CPU to be short of it."""
    busy = (loader_cpu_pct(ctx) or 0.0) >= LOADER_CROWDED_PCT
    return busy and bool(cpu_saturated(ctx))


def _blocked_share(seen: _Seen, proc: ProcView, inline_wait: float | None) -> float:
    """Share of the time a loader was blocked reading: sampled ``D`` states while the job
    reads; without states, all of its time off a CPU when storage is the visible limit."""
    if not seen.reads:
        return 0.0
    if proc.blocked_share is None:
        return 1.0 if seen.storage else 0.0
    if inline_wait is not None:  # the trainer blocks in its data phase only (a fair upper bound)
        return clamp01(proc.blocked_share / inline_wait) if inline_wait > 0 else 0.0
    return proc.blocked_share
