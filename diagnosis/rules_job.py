"""Job-level rules: healthy compute, an idle GPU, communication, and periodic long steps."""

from __future__ import annotations

from traintop.diagnosis import remedies
from traintop.diagnosis.applied import facts_seen
from traintop.diagnosis.budget import LONG_FACTOR, Budget, Excess
from traintop.diagnosis.busy import busy_evidence, gpm_evidence, gpu_busy, gpu_gaps, gpu_lost_share
from traintop.diagnosis.context import Context, JobView, once
from traintop.diagnosis.findings import candidate
from traintop.diagnosis.job_cpus import job_cpus, throttled
from traintop.diagnosis.model import Candidate, Evidence
from traintop.diagnosis.network_signals import (
    comm_held,
    comm_on_network,
    cpu_queued_share,
    job_traffic,
    link_backlogged,
)
from traintop.diagnosis.pause_kind import pause_kind
from traintop.diagnosis.rules_gil import gil_claim
from traintop.diagnosis.signals import (
    DATA_WAIT_SHARE,
    GPU_IDLE_PCT,
    GPU_SWING_PCT,
    TRAINER_PEGGED_PCT,
    cpu_saturated,
    data_wait,
    held_share,
    nic_busy,
    runnable_pct,
    trainer_queueing,
)
from traintop.diagnosis.stack_text import phase_sample_evidence
from traintop.diagnosis.text import pct, pct100, seconds
from traintop.diagnosis.views import ProcView
from traintop.diagnosis.where import samples_of

COMPUTE_BUSY_SHARE = 0.8  # GPU busy share of the step that counts as device-bound
IDLE_EXPLAINED_BY_DATA = 0.5  # an idle GPU with this much data wait is a data problem
SPREAD_ALIKE = 0.2  # long steps' excess split over the phases like the steps (preemptions)
PREEMPTED_QUEUE = 0.05  # the trainer queued this share of the time or more: it can be preempted
STALL_SHARE = 0.15  # stalls must cost this share of the window's time (beyond the waits)
COMPUTE_RANK = 0.01  # ranks the healthy state above purely advisory (zero-cost) findings
NIC_ONLY = 0.7  # system mode: a busy NIC, no collective timed, is weaker evidence
CPU_BUSY_SHARE = 0.8  # CPU-only job: trainer CPU vs what its threads could use
CROWDED_CPU_SHARE = 0.1  # ... or this share of it while other processes fill the machine
GPU_KNOBS = ("autocast", "compile", "fused_optimizer", "attention", "channels_last", "tf32")
CPU_KNOBS = ("autocast", "compile")


def _device_busy(ctx: Context) -> tuple[Evidence, ...]:
    """The device is saturated by its own counters: the job's busy share (the card's truth,
    never the CUDA-event span) and the GPUs' utilization both at 80 % or more; without a job,
    steady utilization (a swing of 20 points reveals idle gaps)."""
    if not ctx.gpus:
        return _cpu_device(ctx)
    busy = gpu_busy(ctx)
    if busy is None or busy.share < COMPUTE_BUSY_SHARE:
        return ()
    if busy.device is not None and busy.device < COMPUTE_BUSY_SHARE:
        return ()
    if ctx.job is None:  # system mode: the GPUs' utilization, steady
        if (ctx.gpu_util_std or 0.0) >= GPU_SWING_PCT:
            return ()
        which = ", ".join(str(g.index) for g in ctx.gpus)
        util = busy.share * 100.0
        return (Evidence(f"GPU {which} utilization {pct100(util)}", "gpu_util_pct", util, "gpu"),)
    return (busy_evidence(busy),)


def _cpu_device(ctx: Context) -> tuple[Evidence, ...]:
    """Without GPUs an attached job computes on the CPU, which is then its device, but only
    while the trainer is busy: a trainer at 3 % CPU waits on something the probe cannot see.
    What its threads could use is bounded by the CPUs its cgroup gives it."""
    t = ctx.trainer
    if ctx.job is None or t is None or t.cpu_pct is None:
        return ()
    budget = _thread_budget(ctx, t)
    # Demand, not use: a rank that shares the cores with its peers runs or waits to run; the
    # queueing is the CPU being the limit too (time runnable counts as busy, as for workers),
    # for a trainer that does run a fair slice.  One at 2 % CPU whose gloo threads queue at
    # every wake-up (88 %, summed over them, at load 25) is waiting, not computing.
    runs = t.cpu_pct >= CROWDED_CPU_SHARE * budget
    if not _trainer_busy(ctx, (runnable_pct(t) if runs else None) or t.cpu_pct, budget):
        return ()
    text = f"no GPU: training runs on the CPU (trainer at {pct100(t.cpu_pct)} CPU"
    limit = job_cpus(ctx).limit
    could = "its cgroup lets its threads use" if limit is not None else "its threads could use"
    text += f" of {pct100(budget)} {could})"
    return (Evidence(text, "trainer_cpu_pct", t.cpu_pct, "processes"),)


def _thread_budget(ctx: Context, t: ProcView) -> float:
    """What a trainer's threads could use (100 = a CPU): one CPU per thread, at most the CPUs
    the job may use."""
    return max(100.0, min(float(t.num_threads or 1), job_cpus(ctx).cpus) * 100.0)


def _trainer_busy(ctx: Context, cpu: float, budget: float) -> bool:
    """Busy: most of what its threads could use, or one core pegged, or a fair slice of a
    machine that other processes fill (then it runs whenever the scheduler lets it)."""
    if cpu >= CPU_BUSY_SHARE * budget or cpu >= TRAINER_PEGGED_PCT:
        return True
    return bool(cpu_saturated(ctx)) and cpu >= CROWDED_CPU_SHARE * budget


def _throughput(ctx: Context) -> tuple[Evidence, ...]:
    job = ctx.job.job if ctx.job else None
    if job is None or job.samples_per_s is None:
        return ()
    return (
        Evidence(
            f"{job.samples_per_s:.0f} samples/s", "samples_per_s", job.samples_per_s, "training"
        ),
    )


def compute(ctx: Context) -> Candidate | None:
    """The healthy state: the training device is the limit and input keeps up."""
    wait = data_wait(ctx)
    busy = _device_busy(ctx)
    if not busy or (wait is not None and wait >= DATA_WAIT_SHARE):
        return None
    device = "GPU" if ctx.gpus else "CPU"
    facts = busy + gpm_evidence(ctx) + throttled(ctx) + trainer_queueing(ctx) + _throughput(ctx)
    if wait is not None:
        facts += (Evidence(f"data wait {pct(wait)} of time", "data_wait_share", wait, "training"),)
    facts += facts_seen(ctx, GPU_KNOBS if ctx.gpus else CPU_KNOBS)
    return candidate(
        ctx,
        "compute",
        severity="ok",
        summary=f"{device}-bound: the device is the limit (healthy)",
        evidence=facts,
        remedies=remedies.compute(ctx),
        lost=COMPUTE_RANK,
        explained=_busy_share(ctx, busy[0]),
    )


def _busy_share(ctx: Context, fact: Evidence) -> float:
    """The share of the time the device works, which healthy compute explains: the GPU busy
    share or utilization, or the trainer's CPU of what its threads could use."""
    if fact.metric == "gpu_busy_share":
        return fact.value or 0.0
    if fact.metric == "gpu_util_pct":
        return (fact.value or 0.0) / 100.0
    t = ctx.trainer
    if t is None:
        return 0.0
    return min(1.0, max(fact.value or 0.0, runnable_pct(t) or 0.0) / _thread_budget(ctx, t))


def idle(ctx: Context) -> Candidate | None:
    """A job runs (or holds GPU memory) but its GPU does nothing."""
    util = ctx.gpu_util_pct
    if util is None or util >= GPU_IDLE_PCT:
        return None
    if (data_wait(ctx) or 0.0) >= IDLE_EXPLAINED_BY_DATA:
        return None
    which = ", ".join(str(g.index) for g in ctx.gpus)
    fact = Evidence(f"GPU {which} utilization {pct100(util)}", "gpu_util_pct", util, "gpu")
    if ctx.job is None and not any(g.pids for g in ctx.gpus):
        return candidate(
            ctx,
            "idle",
            severity="info",
            summary="GPUs idle: no process is using them",
            evidence=(fact,),
            remedies=(),
            lost=0.0,
            explained=1.0 - util / 100.0,
        )
    return candidate(
        ctx,
        "idle",
        severity="warning",
        summary=_idle_summary(ctx),
        evidence=(fact, *_job_state(ctx)),
        remedies=remedies.IDLE,
        lost=1.0 - util / 100.0,
    )


def _idle_summary(ctx: Context) -> str:
    job = ctx.job.job if ctx.job else None
    if job is not None and job.state != "live":
        return f"Job {job.name} is {job.state}: its GPU is idle"
    return "A job runs but leaves its GPU idle"


def _job_state(ctx: Context) -> tuple[Evidence, ...]:
    """A live job proves the GPU is left idle by stepping; a stopped one by its silence."""
    view = ctx.job
    job = view.job if view else None
    if view is not None and job is not None and job.state == "live" and job.steps_per_s:
        text = f"job {job.name} runs {job.steps_per_s:.1f} steps/s"
        text += "" if _timed(view) else ", none timed on the GPU"
        return (Evidence(text, "steps_per_s", job.steps_per_s, "training"),)
    if job is None or job.last_step_age_s is None:
        return ()
    text = f"last step {seconds(job.last_step_age_s)} ago (state {job.state})"
    return (Evidence(text, "last_step_age_s", job.last_step_age_s, "training"),)


def _timed(job: JobView) -> bool:
    """Whether the probe timed the job's steps on the GPU (CUDA events): its queued share, or
    an older collector's busy share, which was that span."""
    return job.gpu_queued_share is not None or (
        job.gpu_busy_share is not None and job.job.gpu_busy_source is None
    )


def network(ctx: Context) -> Candidate | None:
    """Communication is the limit: waiting on peers that the CPU queueing of the job's slowest
    rank does not explain takes a large share of the step (network_signals) *and* the link shows
    it is the limit: the rank's connections hold data they cannot send, or a NIC runs near its
    link's rate while the GPUs wait (multi-rank jobs, or system mode).  Time in a collective is
    time waiting for the slowest peer: without the link's own witness it is the peer's (a
    checkpoint, a quota), never the network's.  The job's namespace traffic is quoted."""
    lost, facts = comm_on_network(ctx)
    backlog = link_backlogged(ctx) if facts else ()
    lost, facts = (lost, facts + backlog) if backlog else (0.0, ())
    nics = nic_busy(ctx)
    multi = ctx.job is None or ctx.job.job.world_size > 1
    if nics and multi and gpu_gaps(ctx):
        facts, lost = facts + gpu_gaps(ctx) + nics, max(lost, gpu_lost_share(ctx))
    if not facts:
        return None
    facts += job_traffic(ctx)
    return candidate(
        ctx,
        "network",
        severity="warning",
        summary=f"Communication-bound: {pct(lost)} of time in collectives/network",
        evidence=facts,
        remedies=remedies.network(lost, _rate(ctx)),
        lost=lost,
        steady=comm_held(ctx),
        certainty=1.0 if ctx.mode == "attach" else NIC_ONLY,
    )


def periodic_stall(ctx: Context) -> Candidate | None:
    """A few steps far longer than the rest (checkpoints, eval, logging) cost a large share.
    It claims only the long steps' excess that fell outside the waits (for the next batch,
    for the peers): that part of it is the data or communication rules' time (a loader that
    delivers in bursts makes every other step long), but for the waits of the long steps that
    are pauses (an evaluation's own batches: ``Excess.paused_wait``).  A thread holding the
    GIL in bursts makes the steps of its bursts long: that is its time (``gil_contention``).
    On a crowded host a step also runs long when the trainer waits for a CPU (3-5x the median
    at eleven runnable processes on two cores): what its time queued (the scheduler's figure)
    explains of them is taken off too (``_queued_in_long_steps``)."""
    budget = ctx.job.budget if ctx.job else None
    excess = budget.excess if budget is not None else None
    if budget is None or excess is None:
        return None
    own = excess.outside(budget.waits) + pause_wait(ctx)
    lost = own - _queued_in_long_steps(ctx, budget, excess) - gil_claim(ctx)[2]
    if lost < STALL_SHARE:
        return None  # waits, or long steps the trainer spent queued for a CPU
    phase = pause_phase(excess, budget.waits)
    text = (
        f"{excess.count} of {excess.steps} steps took > {LONG_FACTOR:.0f}× the "
        f"{seconds(excess.median_s)} median (max {seconds(excess.longest_s)}): "
        f"{pct(own)} of time beyond it{f', in {phase}' if phase else ''}"
    )
    samples = samples_of(ctx, phase, fresh_s=None) if phase else None  # (where.pause_wish)
    stacks = phase_sample_evidence(samples, ctx.job.job.rank) if ctx.job else None
    return candidate(
        ctx,
        "periodic_stall",
        severity="warning",
        summary=f"Periodic long steps cost {pct(lost)} of training time",
        evidence=(Evidence(text, "stall_share", lost, "training"), *filter(None, (stacks,))),
        remedies=remedies.periodic(
            lost, _pause(excess), excess.count, _rate(ctx), pause_kind(samples)
        ),
        lost=lost,
        steady=_stalls_held(ctx, excess.median_s),
    )


def _queued_in_long_steps(ctx: Context, budget: Budget, excess: Excess) -> float:
    """What waiting for a CPU explains of the long steps' excess.  Spread evenly, the queued
    share of the long steps' time.  But when the excess falls in the phases as the steps' time
    does (every phase stretched alike: preemptions, not a checkpoint or an evaluation at one
    point of the loop), the queueing is where the long steps are: a 2 ms step preempted for 20
    ms is a long step, and all of the trainer's queued time may be in them."""
    queued = cpu_queued_share(ctx)
    if queued > 0 and _spread_like_steps(budget, excess):
        return queued
    return queued * excess.time_share


def pause_wait(ctx: Context) -> float:
    """The share of the time the rank waited for data inside its pauses (an evaluation's own
    loading): ``periodic_stall``'s, so not the data rules' (the time is accounted once); none
    where the long steps are a trainer preempted.  Made once a rank: four rules read it."""
    return once(ctx, "pause_wait", _pause_wait)


def _pause_wait(ctx: Context) -> float:
    budget = ctx.job.budget if ctx.job else None
    excess = budget.excess if budget is not None else None
    if budget is None or excess is None or _preempted(ctx, budget, excess):
        return 0.0
    return excess.paused_wait


def _preempted(ctx: Context, budget: Budget, excess: Excess) -> bool:
    """Whether the long steps are a trainer preempted rather than paused: every phase, the
    wait for data too, stretched alike while the trainer queued for a CPU at least
    ``PREEMPTED_QUEUE`` of the time (an evaluation that loads its batches as the loop does
    stretches them alike too, on a CPU of its own)."""
    return cpu_queued_share(ctx) >= PREEMPTED_QUEUE and _spread_like_steps(budget, excess)


def _spread_like_steps(budget: Budget, excess: Excess) -> bool:
    """Whether the excess outside the waits splits over the phases as the steps' time does
    (total variation distance <= ``SPREAD_ALIKE``)."""
    names = [n for n in budget.shares if n not in budget.waits]
    steps = sum(budget.shares[n] for n in names)
    extra = sum(excess.by_phase.get(n, 0.0) for n in names)
    if not names or steps <= 0 or extra <= 0:
        return False
    gaps = (abs(budget.shares[n] / steps - excess.by_phase.get(n, 0.0) / extra) for n in names)
    return sum(gaps) / 2 <= SPREAD_ALIKE


def _rate(ctx: Context) -> float | None:
    return ctx.job.job.steps_per_s if ctx.job else None


def _pause(excess: Excess) -> str:
    """``the 2.0 s pauses every 40 steps``: what taking them off the step buys back."""
    every = excess.steps / max(1, excess.count)
    return f"the pauses of up to {seconds(excess.longest_s)} every {every:.0f} steps gone"


def pause_phase(excess: Excess, waits: tuple[str, ...]) -> str | None:
    """The phase holding most of the long steps' excess outside the waits: where the pauses
    are, and the phase their stacks are sampled in (``where.pause_wish``)."""
    own = {n: part for n, part in excess.by_phase.items() if n not in waits and part > 0}
    return max(own, key=own.__getitem__) if own else None


def _stalls_held(ctx: Context, median_s: float) -> float:
    """How regularly long steps came: the share of the window's summaries (after the first)
    whose new steps hold one.  A checkpoint every second holds in all; one evaluation in the
    window, in one."""
    highs = ctx.job.steps.highs[1:] if ctx.job else ()
    seen = [h for h in highs if h is not None]
    return held_share(seen, LONG_FACTOR * median_s) if seen else 1.0
