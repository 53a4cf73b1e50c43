"""Host-side rules: too many threads for the cores (oversubscribed).

The two other ways a GPU starves without the input pipeline being at fault, a Python thread
that cannot launch work fast enough (host_overhead) and host and GPU waiting on each other
(sync_stall), are judged on the card's own counters in :mod:`traintop.diagnosis.rules_launch`.
"""

from __future__ import annotations

from traintop.diagnosis import remedies
from traintop.diagnosis.busy import gpu_gaps
from traintop.diagnosis.context import Context
from traintop.diagnosis.demand import CpuDemand, TrainerDemand
from traintop.diagnosis.findings import candidate
from traintop.diagnosis.host_view import psi_evidence
from traintop.diagnosis.model import Candidate, Evidence
from traintop.diagnosis.signals import cpu_saturated
from traintop.diagnosis.text import pct, pct100

LOAD_PER_CPU = 1.5  # load average per logical CPU quoted as supporting evidence
# With scheduler statistics (see traintop.diagnosis.demand and docs/diagnosis.md):
WAIT_SHARE = 0.2  # the jobs' threads wait for a CPU this share of the time they want one ...
EXCESS_CPUS = 1.0  # ... and want at least one CPU more than the box has (their own doing)
NAMED_TRAINERS = 4
# Without them, thread counts and CPU use only:
THREADS_PER_CPU = 6.0  # the attached jobs' threads per logical CPU (a torch process idles 2-3) ...
GOT_SHARE_MAX = 0.6  # ... getting at most this share of the CPU those threads could use
LOST_MAX = 0.5  # contention slows every job, but rarely by more than half
UNMEASURED_QUEUE = 0.9  # thread counts stand in for the run-queue wait: a little less sure


def _short_of_cpu(ctx: Context) -> tuple[Evidence, ...]:
    """The attached jobs run far more threads than cores and get far less CPU than those
    threads could use: they are the ones fighting over the cores."""
    d, cpus = ctx.box.demand, ctx.box.logical_cpus
    if d is None or d.threads < THREADS_PER_CPU * cpus or d.got_share > GOT_SHARE_MAX:
        return ()
    jobs = f"{d.jobs} training jobs" if d.jobs > 1 else "the training job"
    threads = f"{jobs} run {d.threads} threads on {cpus} CPUs"
    got = f"they get {pct100(d.cpu_pct)} CPU of the {pct100(d.want_pct)} their threads could use"
    return (
        Evidence(threads, "job_threads", float(d.threads), "processes"),
        Evidence(got, "job_cpu_got_share", d.got_share, "processes"),
    )


def _jobs_text(d: CpuDemand) -> str:
    """Who the threads belong to: 3 jobs, 1 job of 8 ranks, or the training job."""
    threads = f"({d.threads} threads)"
    if d.runs == 1:
        return f"1 job of {d.jobs} ranks {threads}" if d.jobs > 1 else f"the training job {threads}"
    ranks = f", {d.jobs} ranks" if d.jobs > d.runs else ""
    return f"{d.runs} jobs{ranks} {threads}"


def _own_wait(ctx: Context, d: CpuDemand) -> tuple[Evidence, ...] | None:
    """This job's share of the queueing: ``None`` when it takes no part (another job's
    threads wait, its own do not), else the evidence naming its trainer."""
    if ctx.job is None:
        return ()
    mine = next((t for t in d.trainers if t.pid == ctx.job.job.pid), None)
    if mine is None or mine.wait_pct is None or mine.cpu_pct + mine.wait_pct <= 0.0:
        return None
    share = mine.wait_pct / (mine.cpu_pct + mine.wait_pct)
    if share < WAIT_SHARE:
        return None
    text = f"trainer {mine.name} (pid {mine.pid}, {mine.threads} threads) waits for a CPU"
    text += f" {pct(share)} of the time"
    return (Evidence(text, "trainer_cpu_wait_share", share, "processes"),)


def _queueing(ctx: Context) -> tuple[Evidence, ...]:
    """The jobs' threads queue for CPUs they themselves oversubscribe: they want at least one
    CPU more than the box has and wait a large share of the time they want one."""
    d, cpus = ctx.box.demand, ctx.box.logical_cpus
    if d is None or d.wait_share is None or d.demand_cpus is None:
        return ()
    if d.wait_share < WAIT_SHARE or d.demand_cpus < cpus + EXCESS_CPUS:
        return ()
    own = _own_wait(ctx, d)
    if own is None:
        return ()
    want, wait = ("want", "wait") if d.runs > 1 else ("wants", "waits")
    text = f"{_jobs_text(d)} {want} {d.demand_cpus:.1f} CPUs of {cpus}"
    text += f" and {wait} for one {pct(d.wait_share)} of the time"
    return (Evidence(text, "job_cpu_wait_share", d.wait_share, "processes"), *own, _named(d))


def _busy(t: TrainerDemand) -> str:
    """How many of the trainer's threads were runnable at least half the time, where measured."""
    return "" if t.busy_threads is None else f" ({t.busy_threads:.0f} busy)"


def _named(d: CpuDemand) -> Evidence:
    """Which trainers those threads belong to, busiest first (four named, then a count)."""
    ranked = sorted(d.trainers, key=lambda t: -t.threads)
    names = [f"{t.name} (pid {t.pid}) {t.threads}{_busy(t)}" for t in ranked[:NAMED_TRAINERS]]
    more = len(ranked) - NAMED_TRAINERS
    text = "threads per trainer: " + ", ".join(names) + (f" and {more} more" if more > 0 else "")
    return Evidence(text, "job_threads", float(d.threads), "processes")


def oversubscribed(ctx: Context) -> Candidate | None:
    """More runnable threads than cores: every thread gets a slice and all run slower.
    Judged from the jobs' own run-queue waits where the kernel keeps them, else from their
    thread counts and CPU (idle threads inflate what they could use, so that path needs a
    saturated CPU); a GPU job must also show GPU gaps; the load average only supports it."""
    queued = _queueing(ctx)
    saturated = cpu_saturated(ctx)
    measured = ctx.box.demand is not None and ctx.box.demand.wait_share is not None
    short = queued if measured else (_short_of_cpu(ctx) if saturated else ())
    if not short or (ctx.gpus and not gpu_gaps(ctx)):
        return None  # a busy GPU: CPU contention costs this job nothing
    cpus, load = ctx.box.logical_cpus, ctx.box.load1
    own = ctx.job.job.pressure if ctx.job else None
    facts = [*short, *saturated, *psi_evidence(own, ctx.box.host, "cpu")]
    if load is not None and load >= LOAD_PER_CPU * cpus:
        facts.append(Evidence(f"load average {load:.1f} on {cpus} CPUs", "load1", load, "cpu"))
    return candidate(
        ctx,
        "oversubscribed",
        severity="warning",
        summary=f"CPU oversubscribed: {short[0].text}",
        evidence=facts,
        remedies=remedies.oversubscribed(ctx),
        lost=_lost(ctx.box.demand),
        certainty=1.0 if measured else UNMEASURED_QUEUE,
    )


def _lost(d: CpuDemand | None) -> float:
    """The share of speed contention costs the jobs: their measured wait share, else what
    their CPU use suggests (capped: contention rarely halves a job)."""
    if d is None:
        return 0.0
    if d.wait_share is not None:
        return d.wait_share
    return min(LOST_MAX, 1.0 - d.got_share)
