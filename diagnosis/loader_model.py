"""The input pipeline as a closed loop, for predicting what a change of its settings buys.

A DataLoader with ``n`` workers and ``prefetch_factor`` p keeps ``n × p`` batch indices out at
once: each is taken by a worker, which spends ``batch_s`` on it (its CPU time, and what it waits
on off the CPU: a fetch's latency, a blocked read), and the batch then waits for the trainer,
which spends ``step_s`` of its own on each step before it asks for the next batch and hands the
index back.  That is a closed queueing network of two stations with ``n × p`` customers, and its
throughput is Little's law's: what is in flight over the time round the loop.  With every
service time constant it is ``min(n / batch_s, 1 / step_s)``; with exponential ones it is less,
most where the two stations are matched and the loop holds few indices (the birth-death chain
below is exact for it).  Real loaders lie between the two (a sleep-bound fetch is nearly
constant, a remote store's latency or a CPU-bound worker sharing cores is not): a loop's
``variability`` says where, the squared coefficient of variation of the waits for its batches
(Kingman's: a queue's wait grows with its service times' squared CV), ``VARIABILITY`` where
they say nothing.

CPU is a separate limit: the cores the job gets cap batches per second at ``cores /
cpu_per_step`` (the workers' CPU per batch plus the trainer's per step), whatever the workers'
count.  It gets what its cgroup allows (quota, cpuset) of what the host's other processes leave
it (``host_share``: on a full host, a fair share among runnable threads, so more workers get
more).  And when its own runnable threads outnumber those cores, each runs that share of the time:
the CPU parts of a worker's batch and of the trainer's step stretch alike (``stretched``), so
workers that crowd the trainer's main thread slow the loop down.
``num_workers=0`` loads in the trainer, in series with its step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

# Where a loader lies between constant (0) and exponential (1) service times when its waits
# say nothing (too few steps waited in the window): halfway.
VARIABILITY = 0.5
MAX_WORKERS = 32  # the most workers a remedy proposes: each holds a copy of the dataset
SATURATED = 0.95  # the rate at which a bound counts as reached
MARGINAL = 0.03  # a worker that buys less than this is past the knee
ROOT_STEPS = 40  # the most steps the inversion takes (a handful is the rule)
ROOT_TOLERANCE = 1e-4  # of the rate, relative: the inversion's accuracy


class Loop(NamedTuple):
    """One rank's loader and step, as measured, in seconds per batch (one batch a step).  A
    named tuple: every prediction varies it a few times (``_replace``), on every tick."""

    workers: int  # 0: the trainer loads its own batches
    prefetch: int  # batches each worker is given ahead (torch's prefetch_factor)
    batch_s: float  # a worker's time on one batch at the current load: CPU, queueing, waits
    step_s: float  # the trainer's own time a step (every phase but the wait for data)
    cpu_s: float  # CPU seconds a step costs the job: its loaders' and its trainer's
    cores: float  # the CPUs the rank may use: its share of its cgroup's (quota, cpuset) or host's
    load_cpu_s: float = 0.0  # of ``batch_s`` (and ``cpu_s``): the loader's CPU on a batch
    read_s: float = 0.0  # of ``batch_s``: the loader blocked reading a batch
    read_limit: float | None = None  # steps/s its storage allows (a read limit it is at)
    host: float = 0.0  # the host's CPUs, the rank's share (0: others take none of them)
    others: float = 0.0  # CPUs other processes took of them, the rank's share
    threads: float = 1.0  # the trainer's threads that want a CPU half the time or more
    demand: float = 1.0  # CPUs the trainer's threads wanted (on one, or queued for one)
    main_cpu_s: float = 0.0  # of ``step_s``: the trainer's main thread on a CPU
    variability: float = VARIABILITY  # where its service times lie: 0 constant, 1 exponential
    handoff_s: float = 0.0  # the trainer taking a worker's batch in (``trainer_s``)
    serve_s: float = 0.0  # of ``load_cpu_s``: the worker's other threads handing it over


def chain_rate(workers: int, tokens: int, batch_s: float, step_s: float) -> float:
    """Steps/s of the closed loop with exponential service times: ``tokens`` indices, a
    station of ``workers`` parallel servers of mean ``batch_s``, one consumer of mean
    ``step_s``.  The state is the indices at the workers: its weights grow by ``ρ / k`` up to
    ``workers`` (ρ = ``batch_s / step_s``), then by ``ρ / workers`` (a geometric tail, summed
    in closed form).  The trainer works unless every index is at the workers."""
    ratio = batch_s / step_s
    weight, total = 1.0, 1.0  # state 0: every index waits at the trainer
    head = min(workers, tokens)
    for k in range(1, head + 1):
        weight *= ratio / k
        total += weight
        if total > 1e200:  # the workers are far slower: rescale, the ratio is what counts
            weight, total = weight / total, 1.0
    rest = tokens - head
    if rest:
        q = ratio / workers
        tail = rest if q == 1.0 else q * (1.0 - q**rest) / (1.0 - q) if q < 1.0 else None
        if tail is None:  # q > 1: the last state dominates, sum the tail from its end
            last = weight * q**rest if rest * math.log(q) < 690 else math.inf
            tail_sum = last * (1.0 - q**-rest) / (1.0 - 1.0 / q)
            weight, total = last, total + tail_sum
        else:
            total += weight * tail
            weight *= q**rest
    if not math.isfinite(weight) or not math.isfinite(total):
        return workers / batch_s  # the workers hold every index: they set the pace
    return (1.0 - weight / total) / step_s


def loop_rate(workers: int, prefetch: int, batch_s: float, step_s: float,
              variability: float = VARIABILITY) -> float:  # fmt: skip
    """Steps/s of the loop between constant service times (``variability`` 0) and
    exponential ones (1)."""
    if workers <= 0:
        return 1.0 / (batch_s + step_s)
    steady = min(workers / batch_s, 1.0 / step_s)
    tokens = workers * max(1, prefetch)
    return steady - variability * (steady - chain_rate(workers, tokens, batch_s, step_s))


def trainer_s(loop: Loop, workers: int, step_s: float) -> float:
    """The trainer's time a step with ``workers``: its own, and with workers the handoff of
    each batch (unpickling it, mapping its tensors' shared memory: in its wait for data but
    work of its own, in series with its step); a trainer that loads its batches has none."""
    return step_s + loop.handoff_s if workers > 0 else step_s


def rate(
    loop: Loop, workers: int | None = None, cores: float | None = None, prefetch: int | None = None
) -> tuple[float, str]:
    """Steps/s with some settings changed, and what bounds it then: ``compute`` (the step),
    ``workers`` (too few of them), ``cores``, or ``disk``.  Workers within ``SATURATED`` of
    what no count of them can pass are not the bound: what stops them is."""
    n = loop.workers if workers is None else workers
    p = loop.prefetch if prefetch is None else prefetch
    limit = loop.cores if cores is None else cores
    c = min(limit, host_share(loop, n))
    batch_s, step_s = stretched(loop, n, limit)
    step_s = trainer_s(loop, n, step_s)
    beyond, most = "compute", 1.0 / step_s  # what no count of workers can pass
    if loop.cpu_s > 0 and c / loop.cpu_s < most:
        beyond, most = "cores", c / loop.cpu_s
    if loop.read_limit is not None and loop.read_limit < most:
        beyond, most = "disk", loop.read_limit
    value = loop_rate(n, p, batch_s, step_s, loop.variability)
    value = value if value < most else most
    short = n > 0 and n / batch_s < most and value < SATURATED * most
    return value, "workers" if short else beyond


def stretched(loop: Loop, workers: int, cores: float) -> tuple[float, float]:
    """The worker's time on a batch and the trainer's on a step when runnable threads
    outnumber the CPUs: each then runs ``CPUs / runnable`` of the time, so the CPU parts of
    both stretch (the trainer's main thread, on the loop's critical path, is slowed by workers
    that crowd it, however many batches they have ready, and by other processes' threads)."""
    slower = slowdown(loop, workers, cores)
    if slower <= 0.0:
        return loop.batch_s, loop.step_s
    return loop.batch_s + loop.load_cpu_s * slower, loop.step_s + loop.main_cpu_s * slower


def slowdown(loop: Loop, workers: int, cores: float) -> float:
    """How much longer a CPU second takes for the job's threads: ``runnable / CPUs - 1`` where
    more threads want a CPU than there are, among the job's own on the CPUs its cgroup allows
    (``cores``), and with the other processes' on the host's (0 where they fit).  A worker
    wants a CPU the share of its batch it computes, the trainer what it wanted."""
    busy = loop.load_cpu_s / loop.batch_s if loop.batch_s > 0 else 0.0
    mine = workers * busy + loop.demand
    own = mine / cores - 1.0 if cores > 0 else 0.0
    shared = (mine + loop.others) / loop.host - 1.0 if loop.host > 0 else 0.0
    return max(0.0, own, shared)


def host_share(loop: Loop, workers: int) -> float:
    """The host's CPUs the rank gets beside the other processes (infinite on a host nobody
    shares): what they leave, on a host with room; on a full one, the scheduler shares the
    CPUs among runnable threads alike, so the job's ``m`` threads (its workers, its trainer's
    busy ones) get ``host × m / (others + m)`` against the others' (taken as the CPUs they
    used: each of their threads ran whenever it could), and more workers get more of it."""
    if loop.host <= 0.0:
        return math.inf
    mine = workers + loop.threads
    if loop.others + mine <= loop.host:
        return loop.host - loop.others
    return loop.host * mine / (loop.others + mine)


def _most(loop: Loop) -> float:
    """What no count of workers can pass: the step's pace, the CPUs', the storage's."""
    most = 1.0 / trainer_s(loop, MAX_WORKERS, loop.step_s)
    if loop.cpu_s > 0:
        most = min(most, min(loop.cores, host_share(loop, MAX_WORKERS)) / loop.cpu_s)
    return most if loop.read_limit is None else min(most, loop.read_limit)


def batch_time(workers: int, prefetch: int, steps_per_s: float, step_s: float,
               variability: float = VARIABILITY) -> float | None:  # fmt: skip
    """The worker time per batch that makes the loop run at the measured ``steps_per_s``
    (the inverse of :func:`loop_rate`), None where the step alone explains the rate."""
    if workers <= 0:
        spare = 1.0 / steps_per_s - step_s
        return spare if spare > 0 else None
    if steps_per_s >= loop_rate(workers, prefetch, 1e-9, step_s, variability) * 0.999:
        return None
    return _solve(lambda s: loop_rate(workers, prefetch, s, step_s, variability) - steps_per_s,
                  1e-9, workers / steps_per_s, ROOT_TOLERANCE * steps_per_s)  # fmt: skip


def _solve(f: Callable[[float], float], low: float, high: float, within: float) -> float:
    """The root of ``f`` (falling, positive at ``low``, not at ``high``) by false position on
    the log of its argument, Illinois' variant: a handful of evaluations, not a bisection's
    forty (it runs for every rank whose input the verdict models, on every tick); ``within``:
    how close to zero ``f`` must come."""
    a, b = math.log(low), math.log(high)
    fa, fb = f(low), f(high)
    kept = 0  # which end the last two steps kept: +1 the high one, -1 the low one
    for _ in range(ROOT_STEPS):
        c = (a * fb - b * fa) / (fb - fa) if fb != fa else (a + b) / 2
        fc = f(math.exp(c))
        if abs(fc) <= within:
            return math.exp(c)
        if fc > 0:  # the root lies above c: c is the new low end
            a, fa = c, fc
            fb = fb / 2 if kept == 1 else fb  # the high end kept twice: halve its weight
            kept = 1
        else:
            b, fb = c, fc
            fa = fa / 2 if kept == -1 else fa
            kept = -1
    return math.exp((a + b) / 2)


def workers_for(loop: Loop, most: int = MAX_WORKERS) -> tuple[int, float, str]:
    """The workers that reach the next bound, with their rate and that bound: from the count
    constant service times would need to reach it, as many more as each still buys
    ``MARGINAL`` or more (a loop near its knee gains a little from every worker; past it, one
    more worker buys nothing), or until the rate is within ``SATURATED`` of the bound."""
    bound = _most(loop)
    goal = SATURATED * bound
    n = max(1, loop.workers, min(most, math.ceil(bound * loop.batch_s)))
    value, name = rate(loop, workers=n)
    while n < most and value < goal:
        more, more_name = rate(loop, workers=n + 1)
        if more < value * (1.0 + MARGINAL):
            break
        n, value, name = n + 1, more, more_name
    return n, value, name
