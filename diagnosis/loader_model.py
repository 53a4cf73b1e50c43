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
constant, a CPU-bound worker sharing cores is not): ``VARIABILITY`` is where between, and is the
model's one fitted constant (docs/gains.md).

CPU is a separate limit: the cores the job may use (its cgroup's quota and cpuset, less what
other processes take) cap batches per second at ``cores / cpu_per_step`` (the workers' CPU per
batch plus the trainer's per step), whatever the workers' count.  ``num_workers=0`` loads in the
trainer, in series with its step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Where real loaders lie between constant (0) and exponential (1) service times; fitted on the
# trial's tuning cases (docs/gains.md), the held-out third never seen.
VARIABILITY = 0.5
MAX_WORKERS = 32  # the most workers a remedy proposes: each holds a copy of the dataset
SATURATED = 0.95  # the rate at which a bound counts as reached


@dataclass(frozen=True, slots=True)
class Loop:
    """One rank's loader and step, as measured, in seconds per batch (one batch a step)."""

    workers: int  # 0: the trainer loads its own batches
    prefetch: int  # batches each worker is given ahead (torch's prefetch_factor)
    batch_s: float  # a worker's time on one batch at the current load: CPU, queueing, waits
    step_s: float  # the trainer's own time a step (every phase but the wait for data)
    cpu_s: float  # CPU seconds a step costs the job: its loaders' and its trainer's
    cores: float  # the CPUs the job may use now (quota, cpuset, host less other processes)
    load_cpu_s: float = 0.0  # of ``batch_s`` (and ``cpu_s``): the loader's CPU on a batch
    read_s: float = 0.0  # of ``batch_s``: the loader blocked reading a batch
    read_limit: float | None = None  # steps/s its storage allows (a read limit it is at)


def chain_rate(workers: int, tokens: int, batch_s: float, step_s: float) -> float:
    """Steps/s of the closed loop with exponential service times: ``tokens`` indices, a
    station of ``workers`` parallel servers of mean ``batch_s``, one consumer of mean
    ``step_s``.  The state is the indices at the workers; the chain is solved in one pass."""
    down = 1.0 / step_s  # the trainer finishes a step: an index goes back to the workers
    weight, total, busy = 1.0, 1.0, 0.0  # state 0: every index waits at the trainer
    for k in range(1, tokens + 1):
        busy += weight  # states 0..k-1 have a batch at the trainer
        weight *= down * batch_s / min(k, workers)
        total += weight
        if total > 1e200:  # the workers are far slower: rescale, the ratio is what counts
            weight, total, busy = weight / total, 1.0, busy / total
    return down * busy / total


def loop_rate(workers: int, prefetch: int, batch_s: float, step_s: float) -> float:
    """Steps/s of the loop between constant service times and exponential ones."""
    if workers <= 0:
        return 1.0 / (batch_s + step_s)
    steady = min(workers / batch_s, 1.0 / step_s)
    tokens = workers * max(1, prefetch)
    return steady - VARIABILITY * (steady - chain_rate(workers, tokens, batch_s, step_s))


def rate(
    loop: Loop, workers: int | None = None, cores: float | None = None, prefetch: int | None = None
) -> tuple[float, str]:
    """Steps/s with some settings changed, and what bounds it then: ``compute`` (the step),
    ``workers`` (too few of them), ``cores``, or ``disk``.  Workers within ``SATURATED`` of
    what no count of them can pass are not the bound: what stops them is."""
    n = loop.workers if workers is None else workers
    p = loop.prefetch if prefetch is None else prefetch
    c = loop.cores if cores is None else cores
    others = {"compute": 1.0 / loop.step_s}
    if loop.cpu_s > 0:
        others["cores"] = c / loop.cpu_s
    if loop.read_limit is not None:
        others["disk"] = loop.read_limit
    beyond = min(others, key=others.__getitem__)
    value = min(loop_rate(n, p, loop.batch_s, loop.step_s), others[beyond])
    short = n > 0 and n / loop.batch_s < others[beyond] and value < SATURATED * others[beyond]
    return value, "workers" if short else beyond


def batch_time(workers: int, prefetch: int, steps_per_s: float, step_s: float) -> float | None:
    """The worker time per batch that makes the loop run at the measured ``steps_per_s``
    (the inverse of :func:`loop_rate`), None where the step alone explains the rate."""
    if workers <= 0:
        spare = 1.0 / steps_per_s - step_s
        return spare if spare > 0 else None
    if steps_per_s >= loop_rate(workers, prefetch, 1e-9, step_s) * 0.999:
        return None
    low, high = 1e-9, workers / steps_per_s * 4.0
    for _ in range(48):  # the rate falls as the batch time grows: bisect
        mid = math.sqrt(low * high)
        if loop_rate(workers, prefetch, mid, step_s) > steps_per_s:
            low = mid
        else:
            high = mid
    return math.sqrt(low * high)


def workers_for(loop: Loop, most: int = MAX_WORKERS) -> tuple[int, float, str]:
    """The fewest workers that reach the next bound (the rate within ``SATURATED`` of what
    ``most`` workers would give), with their rate and that bound."""
    ceiling, _ = rate(loop, workers=most)
    for n in range(max(1, loop.workers), most + 1):
        value, bound = rate(loop, workers=n)
        if value >= SATURATED * ceiling:
            return n, value, bound
    return most, *rate(loop, workers=most)
