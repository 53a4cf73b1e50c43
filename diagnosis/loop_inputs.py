"""A rank's input pipeline as the loader model reads it (``loader_model.Loop``), measured from
its window: what each part of a step costs, and what of it is queueing for a CPU.

Per step (one batch a step): the trainer's own time is every phase but the wait for data; the
workers' time on a batch is what makes the measured rate come out of the loop (the model
inverted: a worker also idles when the queue ahead of the trainer is full, which its share of
the time alone would count as work).  Both include the time their threads queued for a CPU
(run-queue wait, and a cgroup quota's throttling, which the kernel counts the same way): that
part is taken out, since it depends on what else wants the cores; the model puts it back for
the threads a change leaves runnable.  The CPU a step costs is the trainer's (all its threads)
plus its workers' per batch.  The cores are the job's (quota, cpuset), and the host's beside
the other processes' runnable threads, read from how long they made the job's own wait.
"""

from __future__ import annotations

from dataclasses import dataclass

from traintop.diagnosis.applied import facts_of
from traintop.diagnosis.budget import DATA_PHASE
from traintop.diagnosis.context import Context, once
from traintop.diagnosis.data_split import data_split, handoff_own_s, serve_s
from traintop.diagnosis.job_cpus import job_cpus, throttled_share, throttling
from traintop.diagnosis.loader_model import VARIABILITY, Loop, batch_time, host_share, slowdown
from traintop.diagnosis.signals import READ_MIN_BYTES_PER_S, data_wait
from traintop.diagnosis.stats import mean_of
from traintop.diagnosis.views import ProcView

DEFAULT_PREFETCH = 2  # torch's prefetch_factor when the probe did not see the loader
MIN_OWN_SHARE = 0.2  # queueing taken out leaves at least this share of a part's time
MIN_CORES = 0.1  # however busy the box, a rank gets some CPU
AT_LIMIT = 0.8  # a job reading this share of a read limit is at it
COUNTED = 0.3  # ... or this share of it counted, with its loaders blocked BLOCKED of the time
BLOCKED = 0.5
MIN_WAITS = 10  # steps that waited for a batch: fewer say nothing of the waits' spread
THROTTLED_MAX = 0.9  # the share of a step a quota's throttling is taken to hold the trainer
FULL_PCT = 90.0  # a host busier than this had no CPU to spare: its threads shared the CPUs


@dataclass(frozen=True, slots=True)
class Measured:
    """The loop and the figures its words quote."""

    loop: Loop
    steps_per_s: float
    others_cpus: float  # CPUs other processes took meanwhile


def measured_loop(ctx: Context) -> Measured | None:
    """The rank's loop (None: no step rate, or no loader time to model)."""
    return once(ctx, "loop", _measure)


def _measure(ctx: Context) -> Measured | None:
    job = ctx.job.job if ctx.job else None
    rate = job.steps_per_s or job.batches_per_s if job else None
    wait = data_wait(ctx)
    if job is None or not rate or wait is None:
        return None
    workers, prefetch = _settings(ctx)
    variability = _variability(ctx, workers)
    load_cpu, read = _loader_parts(ctx, rate, workers)
    handoff = _handoff_s(ctx, rate, workers, wait, load_cpu)
    batch_s, step_s = _times(ctx, rate, wait, (workers, prefetch, handoff), variability)
    others = others_cpus(ctx)
    cpus = job_cpus(ctx)
    ranks = max(1, cpus.ranks)
    loop = Loop(
        workers=workers,
        prefetch=prefetch,
        batch_s=batch_s,
        step_s=step_s,
        cpu_s=_cpu_s(ctx, rate),
        cores=max(MIN_CORES, cpus.cpus),
        load_cpu_s=min(load_cpu, batch_s),
        read_s=min(read, max(0.0, batch_s - load_cpu)),
        read_limit=_read_limit(ctx, job.read_limit_bps, rate),
        host=_delivered(ctx, cpus.host) / ranks,
        others=_others_runnable(ctx, others) / ranks,
        threads=_busy_threads(ctx),
        demand=_trainer_demand(ctx),
        main_cpu_s=min(step_s, _main_cpu_s(ctx, rate, workers, wait)),
        variability=variability,
        handoff_s=handoff,
        serve_s=min(load_cpu, serve_s(ctx, rate)) if workers > 0 else 0.0,
    )
    return Measured(loop if _queued(ctx) else _unstretched(loop), rate, others)


def _times(
    ctx: Context, rate: float, wait: float, settings: tuple[int, int, float], variability: float
) -> tuple[float, float]:
    """A worker's time on a batch (the loop inverted at the measured rate, the trainer's
    handoff of each batch added to its step) and the trainer's own time a step, each less the
    time its threads queued for a CPU."""
    workers, prefetch, handoff = settings
    own = (1.0 - wait) / rate
    batch = batch_time(workers, prefetch, rate, own + handoff, variability)
    if batch is None:  # the step alone explains the rate: batches are never late
        batch = 0.0 if workers == 0 else own * 1e-3
    trainer_wait = _wait_s(ctx, ctx.trainer, rate)
    step_s = _less(own, trainer_wait * (1.0 - wait if workers == 0 else 1.0))
    loader_wait = trainer_wait * wait if workers == 0 else _workers_wait(ctx, rate)
    return _less(batch, loader_wait), step_s


def _variability(ctx: Context, workers: int) -> float:
    """The squared coefficient of variation of the waits for a batch, at most 1: how far the
    loop's service times are from constant.  Read on rounds of ``workers`` steps (those that
    waited): workers started together deliver in bursts, one long wait then short ones, a
    pattern of the round, not a spread of their times."""
    job = ctx.job
    columns = job.steps.phase_times if job is not None else None
    names = [p.name for p in job.job.phases] if job is not None else []
    if columns is None or DATA_PHASE not in names or len(columns) != len(names):
        return VARIABILITY
    steps, n = columns[names.index(DATA_PHASE)], max(1, workers)
    rounds = (sum(steps[i : i + n]) for i in range(len(steps) % n, len(steps), n))
    waits = [w for w in rounds if w > 0.0]
    if len(waits) < MIN_WAITS:
        return VARIABILITY
    mean = sum(waits) / len(waits)
    spread = sum((w - mean) ** 2 for w in waits) / len(waits)
    return min(1.0, spread / (mean * mean)) if mean > 0 else VARIABILITY


def _queued(ctx: Context) -> bool:
    """Whether the scheduler's run-queue waits were measured (and taken out of the parts)."""
    procs = (ctx.trainer, *ctx.workers)
    return any(p.cpu_wait_pct is not None for p in procs if p is not None)


def _unstretched(loop: Loop) -> Loop:
    """Without the run-queue waits, the parts as measured hold the job's own crowding: what
    the model puts back for the threads it has now (``slowdown``) is taken out first."""
    c = min(loop.cores, host_share(loop, loop.workers))
    slower = slowdown(loop, loop.workers, c)
    if slower <= 0.0:
        return loop
    batch = max(loop.load_cpu_s + loop.read_s, loop.batch_s - loop.load_cpu_s * slower)
    step = max(loop.main_cpu_s, loop.step_s - loop.main_cpu_s * slower)
    return loop._replace(batch_s=batch, step_s=step)


def _handoff_s(ctx: Context, rate: float, workers: int, wait: float, load: float) -> float:
    """Seconds a step the trainer's main thread spends taking a worker's batch in, inside its
    wait for data: its own part, as the probe timed it (its CPU unpickling, the worker's
    serving the tensors' shared memory: ``data_split.handoff_own_s``), never more than the
    wait.  From an older probe, or a pin-memory thread's: of the CPU its main thread uses a
    step, what its own phases cannot hold (more than their wall time) is that: their CPU held
    it all.  Where they could hold it all, part of them waited off the CPU (for a device): the
    handoff is then somewhere between none and all of that CPU, never more than the wait, nor
    than a worker's CPU on the batch (which pickles what the trainer unpickles: ``load``, its
    CPU a batch): taken as half of it."""
    timed = handoff_own_s(ctx)
    if workers > 0 and timed is not None:
        return min(timed, wait / rate)
    cpu = ctx.trainer.main_cpu_pct if ctx.trainer is not None else None
    if workers == 0 or cpu is None or not ctx.workers:  # the process's whole CPU says nothing
        return 0.0
    main, own = cpu / 100.0 / rate, (1.0 - wait) / rate
    if main > own:
        return min(main - own, wait / rate)
    return min(main, wait / rate, load) / 2.0


def _main_cpu_s(ctx: Context, rate: float, workers: int, wait: float) -> float:
    """CPU seconds a step the trainer's main thread spends outside its own loading: its
    critical path, which workers that crowd the cores slow down."""
    t = ctx.trainer
    cpu = (t.main_cpu_pct if t.main_cpu_pct is not None else t.cpu_pct) if t else None
    if cpu is None:
        return 0.0
    own = cpu / 100.0 / rate
    return own * (1.0 - wait) if workers == 0 else own


def _read_limit(ctx: Context, limit_bps: float | None, rate: float) -> float | None:
    """Steps/s the job's read limit allows, where it reads at that limit already (a limit far
    above what it reads is on another device, or not what holds it).  Reads the limit holds
    back are counted to the kernel thread that lets them through later, not to the job
    (``/proc/PID/io`` saw half of them under a blkio limit, or four fifths): loaders blocked
    reading most of the time, under a limit, with a good part of it counted, are at the limit,
    and the limit over the bytes counted would promise room that is not there."""
    total = _reads(ctx)
    if limit_bps is None or total <= 0.0:
        return None
    blocked = mean_of(p.blocked_share for p in ctx.workers) or 0.0
    if total >= COUNTED * limit_bps and blocked >= BLOCKED:
        return rate
    return limit_bps / (total / rate) if total >= AT_LIMIT * limit_bps else None


def _loader_parts(ctx: Context, rate: float, workers: int) -> tuple[float, float]:
    """Seconds a batch's loader spends on a CPU and blocked reading: the workers' summed
    shares per batch, or the trainer's parts of its data wait (``data_split``)."""
    if workers == 0 or not ctx.workers:
        split = data_split(ctx)
        return (split.cpu / rate, split.io / rate) if split is not None else (0.0, 0.0)
    cpu = sum(w.cpu_pct or 0.0 for w in ctx.workers) / 100.0
    reads = _reads(ctx) >= READ_MIN_BYTES_PER_S  # blocked while the job reads: on storage
    blocked = sum(w.blocked_share or 0.0 for w in ctx.workers) if reads else 0.0
    return cpu / rate, blocked / rate


def _reads(ctx: Context) -> float:
    """Bytes a second the rank's trainer and workers read."""
    procs = (ctx.trainer, *ctx.workers)
    return sum(p.read_bytes_per_s or 0.0 for p in procs if p is not None)


def _settings(ctx: Context) -> tuple[int, int]:
    """``num_workers`` and ``prefetch_factor`` as the probe saw them, else the workers seen."""
    facts = facts_of(ctx)
    if facts is not None and facts.loaders:
        first = facts.loaders[0]
        return first.num_workers, first.prefetch_factor or DEFAULT_PREFETCH
    return len(ctx.workers), DEFAULT_PREFETCH


def _less(total: float, queued: float) -> float:
    """``total`` less its queueing, never below ``MIN_OWN_SHARE`` of it."""
    return max(total * MIN_OWN_SHARE, total - queued)


def _wait_s(ctx: Context, proc: ProcView | None, rate: float) -> float:
    """Seconds a step the process's main thread queued for a CPU; where the scheduler's
    figure is missing and a quota throttles the job, the time it held the job back."""
    if proc is None:
        return 0.0
    wait = proc.main_wait_pct if proc.main_wait_pct is not None else proc.cpu_wait_pct
    if wait is None:
        limit = throttling(ctx)
        held = limit.throttled_s_per_s if limit is not None else None
        wait = min(THROTTLED_MAX, held) * 100.0 if held else None
    return (wait or 0.0) / 100.0 / rate


def _workers_wait(ctx: Context, rate: float) -> float:
    """Seconds one batch's worker queued for a CPU: the workers' summed wait per batch."""
    return sum(w.cpu_wait_pct or 0.0 for w in ctx.workers) / 100.0 / rate


def _cpu_s(ctx: Context, rate: float) -> float:
    """CPU seconds a step costs the rank: its trainer's threads and its workers; at least what
    its quota gave it, where the kernel throttled the job: a period it was throttled in is one
    whose quota it spent, so the rank used its CPUs that share of the time (per-process samples
    that miss a worker's or a thread's CPU would set the CPUs' bound above the rate it is at)."""
    procs = (ctx.trainer, *ctx.workers)
    used = sum((p.cpu_pct or 0.0) for p in procs if p is not None) / 100.0 / rate
    share = throttled_share(ctx) if throttling(ctx) is not None else None
    return used if share is None else max(used, job_cpus(ctx).cpus * min(1.0, share) / rate)


def _others_runnable(ctx: Context, others: float) -> float:
    """Other processes' runnable threads, as what they do to the job's: where the scheduler's
    waits are measured and no quota throttles the job, the count that makes the job's threads
    wait as long as they did (each runnable thread runs ``host / runnable`` of the time, so
    ``(mine + others) / host`` is a CPU second's wall time); else the CPUs the others used.
    On a host with CPUs to spare nobody shared one: the job's waits were the scheduler's
    latency in placing a woken thread, which neither others nor more workers lengthen."""
    procs = [p for p in (ctx.trainer, *ctx.workers) if p is not None and p.cpu_pct]
    waits = [p.cpu_wait_pct for p in procs if p.cpu_wait_pct is not None]
    if not waits or throttling(ctx) is not None or not _full(ctx):
        return others
    used = sum(p.cpu_pct or 0.0 for p in procs)
    slower = sum(waits) / used if used > 0 else 0.0
    mine = _trainer_demand(ctx) + sum(min(1.0, _runnable(w)) for w in ctx.workers)
    return max(others, _delivered(ctx, job_cpus(ctx).host) * (1.0 + slower) - mine)


def _delivered(ctx: Context, host: float) -> float:
    """The host's CPUs as it delivers them: on a full host (threads queued while the CPUs were
    all but busy) the idle share left is the scheduler's gap between a thread's wake-up and its
    run, which more runnable threads do not fill; on one with room, all of them."""
    busy = ctx.box.cpu_busy_pct
    return host * busy / 100.0 if busy is not None and _full(ctx) else host


def _full(ctx: Context) -> bool:
    """Whether the host had no CPU to spare (unknown: taken as full, as before it was read)."""
    busy = ctx.box.cpu_busy_pct
    return busy is None or busy >= FULL_PCT


def _runnable(proc: ProcView) -> float:
    """CPUs a process wanted: on one, or queued for one."""
    return ((proc.cpu_pct or 0.0) + (proc.cpu_wait_pct or 0.0)) / 100.0


def _busy_threads(ctx: Context) -> float:
    """The trainer's threads that want a CPU half the time or more (at least its main one)."""
    busy = ctx.trainer.threads_busy if ctx.trainer is not None else None
    return max(1.0, busy or 0.0)


def _trainer_demand(ctx: Context) -> float:
    """CPUs the trainer's threads wanted: on one, or queued for one."""
    t = ctx.trainer
    if t is None or t.cpu_pct is None:
        return 1.0
    return max(MIN_CORES, _runnable(t))


def others_cpus(ctx: Context) -> float:
    """CPUs the processes that are not attached jobs' took over the window: the host's busy
    CPUs less the jobs' trainers and workers (each rank counts its peers' use as theirs)."""
    busy, demand = ctx.box.cpu_busy_pct, ctx.box.demand
    if busy is None:
        return 0.0
    jobs = demand.cpu_pct / 100.0 if demand is not None else 0.0
    return max(0.0, busy / 100.0 * ctx.box.logical_cpus - jobs)
