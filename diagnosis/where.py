"""Where a rank spends its time, as far as the engine can tell: the one place that says it.

Both answers that point at a rank without a cause to name, ``unknown`` (no rule holds) and
``straggler`` (the others wait on a rank whose own cause may be unknown), say where that rank's
step goes: its dominant phase, how long it takes a step, and whether the rank is on or off a
CPU meanwhile (a process below half a core spends at least half of the time waiting on
something: a device, a lock, a remote call).  Then they say how to look closer.

This module is the single place for that line and that advice.  The rank's helper thread can
sample its stack (``JobCollector.sample_phase``): :func:`sample_wish` says which rank and phase
to sample (both answers ask once their rank has no fresh samples of that phase), the verdict
carries the wish (``JobVerdict.sample``) to whoever drives the collector, and once the samples
arrive :func:`where_time_goes` adds the frames they fold into and :func:`how_to_look` stops
suggesting py-spy.  A periodic stall asks too (:func:`pause_wish`): the stacks in its pauses'
phase say what the pauses are (``pause_kind``), which picks its remedy.
"""

from __future__ import annotations

from traintop.collectors.phase_names import is_comm_phase
from traintop.collectors.snapshot import PhaseSamples, PhaseShare
from traintop.diagnosis.context import Context
from traintop.diagnosis.model import Evidence
from traintop.diagnosis.pause_kind import pause_kind
from traintop.diagnosis.signals import WAIT_EVIDENCE_PCT
from traintop.diagnosis.stack_text import phase_sample_evidence
from traintop.diagnosis.text import pct, pct100, seconds

OFF_CPU_PCT = 50.0  # below half a core the trainer's main thread waits most of the time
SAMPLES_FRESH_S = 30.0  # a rank's phase samples this old are taken again
PY_SPY = (
    "sample the trainer's stacks during the dominant phase (py-spy dump --pid PID) to see what "
    "it waits on"
)
TIME_IT = (
    "time the suspected wait explicitly with probe.phase('name') so the next verdict can name it"
)


def cpu_state(ctx: Context) -> str:
    """``off CPU (trainer at 3 % CPU)`` / ``on CPU (trainer at 47 % CPU, queued for one 50 %
    of the time)``, or nothing.  A trainer queued for a CPU wants it as much as one running:
    on a crowded host a rank burning its core gets half of one and is still on the CPU.  The
    main thread's figures where it is measured alone (a sleeping trainer's other threads, gloo
    and the like, queue too), else the process's."""
    t = ctx.trainer
    if t is None or t.cpu_pct is None:
        return ""
    run, wait = (t.main_cpu_pct, t.main_wait_pct) if t.main_cpu_pct is not None else (
        t.cpu_pct, t.cpu_wait_pct)  # fmt: skip
    queued = wait or 0.0
    where = "off CPU" if run + queued < OFF_CPU_PCT else "on CPU"
    text = f"{where} (trainer at {pct100(t.cpu_pct)} CPU"
    if queued >= WAIT_EVIDENCE_PCT:
        text += f", queued for one {pct100(queued)} of the time"
    return text + ")"


def dominant(ctx: Context, *, own_time: bool = False) -> PhaseShare | None:
    """The rank's largest phase (with ``own_time``: but its wait on its peers, as for a
    straggler, whose peers wait for exactly the rest)."""
    phases = ctx.job.job.phases if ctx.job else ()
    if own_time:
        phases = tuple(p for p in phases if not is_comm_phase(p.name)) or phases
    return max(phases, key=lambda p: p.share) if phases else None


def where_time_goes(ctx: Context, *, own_time: bool = False) -> tuple[Evidence, ...]:
    """The rank's dominant phase with its share, its time a step and its CPU state, then the
    stacks it was sampled in during that phase, once they came."""
    top = dominant(ctx, own_time=own_time)
    if top is None or ctx.job is None:
        return ()
    state = cpu_state(ctx)
    if own_time:
        text = f"rank {ctx.job.job.rank}: {seconds(top.mean_s)} a step in {top.name}"
    else:
        text = f"steps spend {pct(top.share)} in {top.name} ({seconds(top.mean_s)})"
    text += f", {state}" if state else ""
    line = Evidence(text, f"phase.{top.name}.share", top.share, "training")
    stacks = phase_sample_evidence(samples_of(ctx, top.name), ctx.job.job.rank)
    return (line, stacks) if stacks is not None else (line,)


def samples_of(
    ctx: Context, phase: str, fresh_s: float | None = SAMPLES_FRESH_S
) -> PhaseSamples | None:
    """The rank's samples taken in ``phase``, if any came and they are fresh (``fresh_s``
    None: whatever their age)."""
    samples = ctx.job.job.phase_samples if ctx.job else None
    if samples is None or samples.phase not in (None, phase):
        return None
    return None if fresh_s is not None and samples.age_s > fresh_s else samples


def sample_wish(ctx: Context, *, own_time: bool = False) -> tuple[int, str] | None:
    """The rank (pid) and phase to sample, while there are no fresh samples of it."""
    top = dominant(ctx, own_time=own_time)
    if top is None or ctx.job is None or samples_of(ctx, top.name) is not None:
        return None
    return ctx.job.job.pid, top.name


def pause_wish(ctx: Context, phase: str) -> tuple[int, str] | None:
    """The rank (pid) and the phase its periodic pauses fall in, to sample until a set of
    samples says what the pauses are (``pause_kind``), at most once every
    ``SAMPLES_FRESH_S``: sets that missed the pauses ask again, and once one named them the
    remedy keeps that name rather than change with each set."""
    samples = samples_of(ctx, phase, fresh_s=None)
    if ctx.job is None or (
        samples is not None
        and (pause_kind(samples) is not None or samples.age_s <= SAMPLES_FRESH_S)
    ):
        return None
    return ctx.job.job.pid, phase


def how_to_look(ctx: Context, *, own_time: bool = False) -> tuple[str, ...]:
    """What to do to see inside the dominant phase of the rank: py-spy while traintop has no
    samples of it (a rank without the helper thread, or before they came)."""
    if ctx.job is None:
        return ()
    top = dominant(ctx, own_time=own_time)
    sampled = top is not None and samples_of(ctx, top.name) is not None
    steps = (TIME_IT,) if sampled else (PY_SPY, TIME_IT)
    return tuple(step.replace("PID", str(ctx.job.job.pid)) for step in steps)
