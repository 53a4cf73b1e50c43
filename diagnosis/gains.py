"""What each remedy is predicted to buy, from the measured time budget (docs/gains.md).

A remedy changes one part of the step; what that buys follows from where the time goes now and
what bounds the job once that part is gone.  The input pipeline is modelled as the closed loop
it is (:mod:`traintop.diagnosis.loader_model`, measured by
:mod:`traintop.diagnosis.loop_inputs`): more workers, a deeper prefetch, more cores (a larger
quota), reads or CPU work taken out of the loader, each evaluated against the loop and the CPU
bound.  Time the budget places outright is bought back whole when its cause goes: the long
steps' excess (a checkpoint made asynchronous), the peers' wait on a straggler (brought to their
pace).  A change whose effect depends on what the budget cannot see (a kernel's speed under
torch.compile or bf16, how well a step's work parallelises over threads) gets no figure: only
the most it could buy, where the budget bounds that, and the reason.

Every figure is a ratio of steps/s after the change to steps/s now, with the range the window's
noise allows; 1.0 is "no gain", said with what holds the job where it is.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import replace

from traintop.diagnosis.context import Context, once
from traintop.diagnosis.job_cpus import job_cpus, throttling
from traintop.diagnosis.loader_model import MARGINAL, MAX_WORKERS, Loop, rate, workers_for
from traintop.diagnosis.loop_inputs import Measured, measured_loop, others_cpus
from traintop.diagnosis.model import Gain
from traintop.diagnosis.stats import mean_of, std_of

NO_GAIN = 1.03  # below this a prediction is "no gain" (the trial's noise is larger)
NOISE_MIN, NOISE_MAX = 0.05, 0.3  # the relative spread of the inputs a range allows for
QUOTA_STEP = 0.5  # CPUs: a proposed quota is a multiple of this
MIN_SHARE = 0.1  # CPUs: however busy the host, a trainer gets some
MAX_PREFETCH = 16  # batches a worker keeps ahead, at most (each is memory, pinned or not)
THREADS_WASTE = (
    "a step's cost on fewer threads is not in the budget: threads that wait on each other spin"
)
NOT_MODELLED = "not in the time budget"


@functools.lru_cache(maxsize=1024)
def not_modelled(remedy: str, reason: str = NOT_MODELLED, knob: str = "", change: str = "") -> Gain:
    """A remedy with no figure, and why (one object per remedy and reason: every rank of every
    job on every tick offers the same texts)."""
    return Gain(remedy, reason=reason, change=change, knob=knob)


def bound(remedy: str, high: float, reason: str, now: float | None = None) -> Gain:
    """No figure, only the most it can buy: ``high`` (a ratio), said with ``reason``."""
    return Gain(remedy, high=max(1.0, high), reason=reason, steps_per_s=now)


def lost_bound(remedy: str, share: float, reason: str, now: float | None = None) -> Gain:
    """The most a remedy buys when it removes at most ``share`` of the time."""
    return bound(remedy, 1.0 / max(1e-6, 1.0 - min(share, 0.99)), reason, now)


def removed(
    remedy: str, share: float, spread: float, reason: str, now: float | None = None
) -> Gain:
    """A remedy that takes ``share`` of the time off the step: ``1 / (1 - share)``, the share
    known within ``spread`` (relative)."""

    def of(s: float) -> float:
        return 1.0 / max(1e-6, 1.0 - min(0.99, max(0.0, s)))

    low, high = of(share * (1 - spread)), of(share * (1 + spread))
    return Gain(remedy, of(share), low, high, None, reason, now)


# ---- the input pipeline ------------------------------------------------------------------


def _noise(ctx: Context, m: Measured) -> float:
    """How far the window's inputs may be off, relative: the spread of the data wait over the
    window's summaries, and the share of the CPUs other processes took (their load moves)."""
    waits = ctx.job.waits if ctx.job else ()
    mean, std = mean_of(waits), std_of(waits)
    cv = std / mean if mean and std is not None else 0.0
    busy = m.others_cpus / max(1.0, float(ctx.box.logical_cpus))
    return min(NOISE_MAX, NOISE_MIN + cv / 2 + busy / 2)


Change = Callable[[Loop], tuple[float, str]]
Prediction = tuple[float, float, float, str]  # ratio, low, high, what bounds the job then


def _variants(ctx: Context) -> tuple[tuple[Loop, float], ...]:
    """The measured loop and the loop with its parts off by the noise either way (the step,
    the loader, the cores), each with its rate now: what every prediction of the rank reads,
    made once."""
    return once(ctx, "loops", _make_variants)


def _make_variants(ctx: Context) -> tuple[tuple[Loop, float], ...]:
    m = measured_loop(ctx)
    if m is None:
        return ()
    noise, loop = _noise(ctx, m), m.loop
    loops = [loop] + [_varied(loop, k) for k in (1.0 - noise, 1.0 + noise)]
    return tuple((lo, rate(lo)[0]) for lo in loops)


def _ratio_now(ctx: Context, change: Change) -> tuple[float, str]:
    """The ratio a change gives on the measured loop alone (a bound needs no range)."""
    loop, now = _variants(ctx)[0]
    after, bound_by = change(loop)
    return (after / now if now > 0 else 1.0), bound_by


def _varied(loop: Loop, k: float) -> Loop:
    """The loop with its step ``k`` times as long and its loader's parts (all of them) and the
    cores ``1/k`` times: the ends of the range the window's noise allows."""
    return loop._replace(step_s=loop.step_s * k, batch_s=loop.batch_s / k, cores=loop.cores * k,
                         load_cpu_s=loop.load_cpu_s / k, read_s=loop.read_s / k)  # fmt: skip


def _predict(ctx: Context, change: Change) -> Prediction:
    """The ratio a change gives on the measured loop (and its bound then), and the least and
    most it gives on the loops the noise allows."""
    ratios, bound_by = [], ""
    for loop, now in _variants(ctx):
        after, bound = change(loop)
        ratios.append(after / now if now > 0 else 1.0)
        bound_by = bound_by or bound
    return ratios[0], min(ratios), max(ratios), bound_by


def _setting(
    ctx: Context, m: Measured, text: str, knob: str, values: tuple[str, float], after: Change
) -> Gain:
    """What changing ``knob`` (from ``values[0]``, in words, to ``values[1]``) buys: the loop's
    rate with it changed (``after``) over its rate now, with the range the noise allows."""
    now, new = values
    ratio, low, high, bound_by = once(ctx, f"{knob}:{new}", lambda c: _predict(c, after))
    return Gain(
        text, ratio, low, high, _bound_word(ctx, bound_by), "", m.steps_per_s,
        f"{knob} {now} → {new:g}", knob, float(new),
    )  # fmt: skip


def _bound_word(ctx: Context, bound_by: str) -> str:
    """``quota`` for the CPU bound where a quota sets the job's CPUs, else the bound."""
    limit = job_cpus(ctx).limit
    quota = limit is not None and limit.quota_cpus is not None and limit.quota_cpus <= limit.cpus
    return "quota" if bound_by == "cores" and quota else bound_by


def workers_target(ctx: Context) -> tuple[int, int] | None:
    """``(now, proposed)`` DataLoader workers: the fewest that reach the next bound, or twice
    as many as now where no count gains (None: no loop measured)."""
    return once(ctx, "workers", _workers_target)


def _workers_target(ctx: Context) -> tuple[int, int] | None:
    m = measured_loop(ctx)
    if m is None:
        return None
    now = m.loop.workers
    target, _, _ = workers_for(m.loop, worker_room(m.loop))
    return now, target if target > now else max(now + 1, 2 * now)


def worker_room(loop: Loop) -> int:
    """The most workers worth proposing: as many as the rank's CPUs keep busy at the share of
    its time a worker computes (workers that wait on a fetch need no core each; ones that
    compute beyond the CPUs only queue, and take them from the host's other processes)."""
    busy = loop.load_cpu_s / loop.batch_s if loop.batch_s > 0 else 0.0
    if busy <= 0.0:
        return MAX_WORKERS
    return max(1, min(MAX_WORKERS, math.ceil(loop.cores / busy)))


def more_workers(ctx: Context, text: str) -> Gain | None:
    """What ``num_workers`` at :func:`workers_target` buys (``text`` proposes it)."""
    m, target = measured_loop(ctx), workers_target(ctx)
    if m is None or target is None:
        return None
    now, new = target
    return _setting(ctx, m, text, "num_workers", (str(now), new), lambda lo: rate(lo, workers=new))


def prefetch_target(ctx: Context, now: int) -> int:
    """The prefetch depth past which one more batch a worker buys under ``MARGINAL``, from
    ``now`` (twice ``now`` where none buys anything: the remedy then says so)."""
    m = measured_loop(ctx)
    if m is None or m.loop.workers == 0:
        return 2 * now
    depth, value = now, rate(m.loop, prefetch=now)[0]
    while depth < MAX_PREFETCH:
        more = rate(m.loop, prefetch=depth + 1)[0]
        if more < value * (1.0 + MARGINAL):
            break
        depth, value = depth + 1, more
    return depth if depth > now else 2 * now


def deeper_prefetch(ctx: Context, text: str, now: int, new: int) -> Gain | None:
    """What ``prefetch_factor`` ``now`` → ``new`` buys: a deeper queue only smooths the loop
    where its two sides are matched; it never makes a worker faster."""
    m = measured_loop(ctx)
    if m is None or m.loop.workers == 0:
        return None
    after: Change = lambda loop: rate(loop, prefetch=new)  # noqa: E731
    return _setting(ctx, m, text, "prefetch_factor", (str(now), new), after)


def _without(part: str) -> Change:
    """The rate with the loader's CPU (``cpu``), its reads (``read``) or every wait that is
    not CPU (``wait``) taken out of each batch, or the trainer's handoff of it (``handoff``)."""

    def change(loop: Loop) -> tuple[float, str]:
        if part == "cpu":
            batch, cpu = loop.batch_s - loop.load_cpu_s, loop.cpu_s - loop.load_cpu_s
            faster = loop._replace(batch_s=max(1e-6, batch), cpu_s=max(0.0, cpu), load_cpu_s=0.0)
        elif part == "handoff":  # and the worker's threads that serve it, holding its GIL
            serve = loop.serve_s
            faster = loop._replace(handoff_s=0.0, serve_s=0.0,
                                   batch_s=max(1e-6, loop.batch_s - serve),
                                   load_cpu_s=max(0.0, loop.load_cpu_s - serve),
                                   cpu_s=max(0.0, loop.cpu_s - serve))  # fmt: skip
        else:  # no reads: storage no longer limits
            batch = loop.batch_s - loop.read_s if part == "read" else loop.load_cpu_s
            faster = loop._replace(batch_s=max(1e-6, batch), read_s=0.0, read_limit=None)
        return rate(faster)

    return change


WITHOUT_WORDS = {
    "cpu": "the loaders' CPU work gone",
    "read": "every read from storage gone",
    "wait": "the loaders' waits gone",
    "handoff": "the handoff of each batch gone, both sides",
}


def loader_cut(
    ctx: Context, text: str, cut: tuple[str, str], exact: bool = False, knob: str = ""
) -> Gain:
    """A remedy that takes a part of the loader's work away (``cut``: the part, and the change
    in a few words; ``knob``: the setting it turns, for compare): the figure where it takes
    all of it (``exact``: copying the data to RAM takes every read away), else that figure as
    the most it can buy."""
    part, change = cut
    m = measured_loop(ctx)
    if m is None:
        return replace(not_modelled(text), change=change, knob=knob)
    reason, now = WITHOUT_WORDS[part], m.steps_per_s
    if exact:
        ratio, low, high, bound_by = _predict(ctx, _without(part))
        return Gain(text, ratio, low, high, bound_by, reason, now, change, "storage")
    most, bound_by = once(ctx, f"cut:{part}", lambda c: _ratio_now(c, _without(part)))
    return Gain(text, None, None, max(1.0, most), bound_by, reason, now, change, knob)


# ---- the CPUs a job may use ----------------------------------------------------------------


def quota_target(ctx: Context) -> float | None:
    """The quota (CPUs) that reaches the job's next bound: the least multiple of
    ``QUOTA_STEP`` whose rate is within reach of what the host's CPUs would give."""
    m, cpus = measured_loop(ctx), job_cpus(ctx)
    if m is None or cpus.limit is None or cpus.limit.quota_cpus is None:
        return None
    host = float(cpus.host)
    ceiling, _ = rate(m.loop, cores=_rank_cores(host, ctx))
    quota = cpus.limit.quota_cpus
    steps = math.ceil((host - quota) / QUOTA_STEP)
    for i in range(1, steps + 1):
        value = quota + i * QUOTA_STEP
        if rate(m.loop, cores=_rank_cores(value, ctx))[0] >= 0.95 * ceiling:
            return min(value, host)
    return host


def _rank_cores(quota: float, ctx: Context) -> float:
    """A rank's CPUs under a quota of ``quota``, shared by the ranks in it (what the host's
    other processes leave is the loop's own bound)."""
    return max(0.1, quota / max(1, job_cpus(ctx).ranks))


def raise_quota(ctx: Context, text: str, new: float) -> Gain:
    """What a quota of ``new`` CPUs buys a job its quota throttles."""
    m, limit = measured_loop(ctx), throttling(ctx)
    if m is None or limit is None:
        return not_modelled(text)
    cores = _rank_cores(new, ctx)
    quota = limit.quota_cpus or limit.cpus
    return _setting(
        ctx, m, text, "cpu_quota", (f"{quota:g}", new), lambda lo: rate(lo, cores=cores)
    )


def fewer_workers(ctx: Context, text: str, new: int) -> Gain:
    """What ``num_workers`` down to what the quota feeds buys: the model keeps the rate (the
    quota bounds it either way); the point is memory and less switching."""
    m = measured_loop(ctx)
    if m is None:
        return not_modelled(text)
    now = str(m.loop.workers)
    return _setting(ctx, m, text, "num_workers", (now, new), lambda lo: rate(lo, workers=new))


def share_limited(text: str, now: float | None, reason: str) -> Gain:
    """A change the CPUs cannot pay for: no gain, and why."""
    return Gain(text, 1.0, 1.0, 1.0, "cores", reason, now)


def now_rate(ctx: Context) -> float | None:
    job = ctx.job.job if ctx.job else None
    return job.steps_per_s if job else None


# ---- time the budget places outright ------------------------------------------------------


def bounded(
    items: Iterable[str | Gain], share: float, reason: str, now: float | None = None
) -> tuple[Gain, ...]:
    """Remedies that win back at most ``share`` of the time (the idle GPU, the waits on a
    sync, the communication): each with that bound; one already predicted keeps its figure."""
    return tuple(_fill(i, lost_bound("", share, reason, now)) for i in items)


def unmodelled(items: Iterable[str | Gain], reason: str) -> tuple[Gain, ...]:
    """Remedies with no figure, each saying why."""
    return tuple(_fill(i, not_modelled("", reason)) for i in items)


def _fill(item: str | Gain, blank: Gain) -> Gain:
    """``item`` as a ``Gain``: a text, or a remedy that names only its knob, takes ``blank``'s
    figure and reason; one with a figure or a reason of its own keeps them."""
    if isinstance(item, Gain) and (
        item.speedup is not None or item.high is not None or item.reason
    ):
        return item
    text, knob, change = (
        (item, "", "") if isinstance(item, str) else (item.remedy, item.knob, item.change)
    )
    if blank.high is None:
        return not_modelled(text, blank.reason, knob, change)
    return Gain(text, None, None, blank.high, blank.bound_by, blank.reason, blank.steps_per_s,
                change, knob)  # fmt: skip


def few(count: int) -> float:
    """The relative spread of a share measured from ``count`` events (long steps)."""
    return min(NOISE_MAX, max(NOISE_MIN, 1.0 / math.sqrt(max(1, count))))


def more_threads(ctx: Context, text: str, threads: int) -> Gain:
    """``torch.set_num_threads(k)`` for a trainer that computes on the CPU: at most what
    ``k`` busy threads on the cores it may use (what other processes leave of them) give over
    what it uses now (how well its step's work spreads over them is not in the budget);
    nothing where it uses them all."""
    t, cpus = ctx.trainer, job_cpus(ctx)
    used = (t.cpu_pct or 0.0) / 100.0 if t is not None else 0.0
    free = min(cpus.total, cpus.host - others_cpus(ctx)) / max(1, cpus.ranks)
    most = min(float(threads), max(MIN_SHARE, free))
    now = now_rate(ctx)
    if used <= 0.0:
        gain = not_modelled(text)
    elif most <= used * NO_GAIN:
        gain = share_limited(text, now, "its threads already use the CPUs it may use")
    else:
        gain = bound(text, most / used, f"if its step's work spreads over {threads} threads", now)
    # the knob and value: compare sets the threads a run changed beside this bound
    return replace(gain, change=f"torch threads → {threads}", knob="threads", value=threads)


def fewer_threads(ctx: Context, text: str, threads: int) -> Gain | None:
    """``torch.set_num_threads(k)`` for trainers whose threads outnumber the cores (none of
    them with DataLoader workers, whose share the figure cannot split): each then runs on
    ``min(k, its share of what other processes leave of the cores)`` without queueing.  What
    that buys turns on what a step's work costs on fewer threads (a parallel region waits for
    its slowest thread, and one descheduled for a slice holds up its peers): not in the
    budget, and not bounded by it either, since the threads that wait spin on a CPU as well as
    queue for one (3 trainers of 2 threads on 2 cores ran 3.98x faster on one thread each, where
    their queueing alone allowed 3.04x): no figure."""
    d, t = ctx.box.demand, ctx.trainer
    if d is None or t is None or ctx.workers or not t.cpu_pct or d.worker_cpus > 0:
        return None
    gain = not_modelled(text, THREADS_WASTE)
    return replace(gain, change=f"torch threads → {threads} a trainer", knob="threads",
                   value=float(threads), bound_by="cores")  # fmt: skip


def at_value(ctx: Context, knob: str, value: float) -> Gain | None:
    """What setting ``knob`` (``num_workers``, ``prefetch_factor``, ``cpu_quota``) to
    ``value`` buys the rank, whatever value its remedy proposes (None: no loop measured, or
    a knob the loop does not hold)."""
    m = measured_loop(ctx)
    if m is None:
        return None
    loop = m.loop
    changes: dict[str, tuple[str, Change]] = {
        "num_workers": (str(loop.workers), lambda lo: rate(lo, workers=int(value))),
        "prefetch_factor": (str(loop.prefetch), lambda lo: rate(lo, prefetch=int(value))),
        "cpu_quota": (f"{loop.cores:g}", lambda lo: rate(lo, cores=_rank_cores(value, ctx))),
    }
    if knob not in changes:
        return None
    now, after = changes[knob]
    return _setting(ctx, m, f"{knob} {now} → {value:g}", knob, (now, value), after)
