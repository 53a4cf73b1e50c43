"""The straggler as a finding: the time a job's ranks wait on one rank is that rank's to claim.

In a synchronous job the other ranks finish their own work and wait in the collective for the
slowest.  Each rank's rules see only its own side: the fast ranks' time is "communication" (no
network explains it: the network rule takes off the skew), and the slow rank's own cause may be
one no rule names (a blocking call in its forward, a device slower than the others').  Before,
such a job read ``unknown`` with the straggler in the evidence.  Now the straggler claims the
share of their step the other ranks wait on it beyond what it waits itself (what every rank
waits is the collective's own cost) when that is most of their step, and leads, naming the
rank, where its own time goes and its own cause when a rule finds one: the user's next move is
that rank, whatever its cause.  This needs timed collectives on the ranks (the zero-code ``comm``
phase, or the script's own): without them the straggler is found from its own loss and its
cause is the job's answer (:mod:`traintop.diagnosis.fold`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from statistics import median

from traintop.diagnosis import remedies
from traintop.diagnosis.budget import is_wait
from traintop.diagnosis.context import Context, RankResult
from traintop.diagnosis.findings import candidate, with_fixes
from traintop.diagnosis.gains import few
from traintop.diagnosis.model import Candidate, Evidence, Finding, Gain, Straggler
from traintop.diagnosis.stats import share_true
from traintop.diagnosis.straggler_cause import slow_remedies, what_slows
from traintop.diagnosis.text import pct, seconds
from traintop.diagnosis.views import comm_share_of
from traintop.diagnosis.where import how_to_look, where_time_goes

MOST = 0.5  # the others wait on it for most of their step beyond what it waits itself
SLOWED = 0.2  # ... or a fifth of it, where what only it has says why (straggler_cause.py)
GPU_CLOCKS = "straggler.sm_clock_mhz"  # its GPU slower: a throttle rule's own finding
NO_OWN_COST = frozenset({"compute", "unknown"})  # its own findings that name no lost time


def held_back(
    results: Sequence[RankResult], slow: RankResult, straggler: Straggler,
    own: tuple[Candidate, ...],
) -> Candidate | None:  # fmt: skip
    """The ``straggler`` finding, or None when the other ranks' wait on it is not timed or
    is not most of their step (a throttled GPU that holds its peers back a fifth of their step
    is the throttle's case, the straggler named in its evidence; ranks a crowded host keeps a
    little out of step are no straggler's).  Where something only the straggler has says why
    (its quota throttles it, its cpuset is narrower, its GPU slower), a fifth of their step
    suffices: that difference is the cause, and no rule of its own names it."""
    claim = _claim(results, slow)
    if claim is None or claim < (SLOWED if _unnamed_cause(slow, results) else MOST):
        return None
    return candidate(
        slow.ctx,
        "straggler",
        severity="warning",
        summary=f"Rank {slow.job.rank} holds back the job: the other ranks wait for it "
        f"{pct(claim)} of their time",
        evidence=_facts(results, slow, straggler, own),
        remedies=_remedies(results, slow, own, claim),
        lost=claim,
        steady=_held(results, slow),
    )


def _unnamed_cause(slow: RankResult, results: Sequence[RankResult]) -> bool:
    """Whether what only the straggler has, and no rule of its own names, says why it is slow:
    its quota, its cpuset, its queueing.  Its GPU's lower clocks are the throttle rules' case
    (the straggler named in their evidence), which also say why the clocks are down."""
    return any(e.metric != GPU_CLOCKS for e in what_slows(slow, results))


def _claim(results: Sequence[RankResult], slow: RankResult) -> float | None:
    """The share of their step the other ranks (their median) wait beyond what it waits."""
    mine = _comm(slow.ctx)
    others = [c for r in results if r is not slow and (c := _comm(r.ctx)) is not None]
    return median(others) - mine if mine is not None and others else None


def _facts(
    results: Sequence[RankResult], slow: RankResult, straggler: Straggler,
    own: tuple[Candidate, ...],
) -> tuple[Evidence, ...]:  # fmt: skip
    """Who it is, where its own time goes, and its own cause."""
    cause = _own_cause(own, slow, results)
    more = tuple(e for e in what_slows(slow, results) if e.text not in cause.text)
    return (
        Evidence(straggler.text, "straggler_gap", straggler.gap, "training"),
        *where_time_goes(slow.ctx, own_time=True),
        cause,
        *more,
    )


def _remedies(
    results: Sequence[RankResult], slow: RankResult, own: tuple[Candidate, ...], claim: float
) -> tuple[str | Gain, ...]:
    """Its own cause's remedies first (what each buys that rank, at most what the job gains
    when it reaches the others' pace), then the change to what only it has (which brings it
    to the others' pace: that gain), then what to look at on that rank."""
    cause = _costed(own)
    now = slow.job.steps_per_s
    pace = remedies.straggler(slow.job.rank, claim, few(_summaries(slow)), now)
    first = _capped(with_fixes(cause).finding, pace[0]) if cause is not None else ()
    own_fix = slow_remedies(slow, what_slows(slow, results))
    paced = tuple(replace(pace[0], remedy=text) for text in own_fix)
    return (*first, *paced, *pace, *how_to_look(slow.ctx, own_time=True))


def _capped(cause: Finding, pace: Gain) -> tuple[str | Gain, ...]:
    """The cause's remedies with their gains held to what reaching the others' pace buys."""
    found: list[str | Gain] = []
    for text in cause.remedies:
        gain = cause.gain_of(text)
        if gain is None or gain.speedup is None or pace.speedup is None:
            found.append(gain or text)
        elif gain.speedup > pace.speedup:
            found.append(replace(gain, speedup=pace.speedup, low=pace.low, high=pace.high,
                                 bound_by="peers"))  # fmt: skip
        else:
            found.append(gain)
    return tuple(found)


def _summaries(result: RankResult) -> int:
    """How many summaries measured the rank's wait: the straggler's claim's sample count."""
    return len(result.ctx.job.steps.rows) if result.ctx.job else 1


def _comm(ctx: Context) -> float | None:
    return ctx.job.comm[0] if ctx.job and ctx.job.comm else None


def _costed(own: tuple[Candidate, ...]) -> Candidate | None:
    """The straggler's own worst finding that costs it time, if a rule found one."""
    return next((c for c in own if c.finding.bottleneck not in NO_OWN_COST), None)


def _own_cause(
    own: tuple[Candidate, ...], slow: RankResult, results: Sequence[RankResult]
) -> Evidence:
    """What makes it slow: a rule's finding on it, else how its own work compares."""
    cause = _costed(own)
    if cause is not None:
        f = cause.finding
        first = f.evidence[0].text if f.evidence else f.summary
        text = f"its own cause: {f.bottleneck} ({first})"
        return Evidence(text, f"straggler.{f.bottleneck}", cause.lost_share, "training")
    slows = what_slows(slow, results)
    if slows:
        return Evidence(f"its own cause: {slows[0].text}", slows[0].metric, slows[0].value,
                        slows[0].panel)  # fmt: skip
    computes = any(c.finding.bottleneck == "compute" for c in own)
    head = "more work than the others (compute)" if computes else "none a rule names"
    mine = _own_work_s(slow.ctx)
    others = [w for r in results if r is not slow and (w := _own_work_s(r.ctx)) is not None]
    if mine is None or not others:
        return Evidence(f"its own cause: {head}", "straggler.cause", None, "training")
    text = (
        f"its own cause: {head}; its own work takes {seconds(mine)} a step, "
        f"the other ranks' {seconds(median(others))}"
    )
    return Evidence(text, "straggler.own_work_s", mine, "training")


def _own_work_s(ctx: Context) -> float | None:
    """Seconds a step the rank spends on its own work: every phase but the waits."""
    phases = ctx.job.job.phases if ctx.job else ()
    if not phases:
        return None
    return sum(p.mean_s for p in phases if not is_wait(p.name))


def _held(results: Sequence[RankResult], slow: RankResult) -> float:
    """How steadily it held the others back: the share of the window's summaries in which the
    median other rank waited ``MOST`` more of its step than the straggler did."""
    series = {r.job.pid: _comm_series(r.ctx) for r in results}
    n = min(map(len, series.values()))
    if n == 0:
        return 1.0
    mine = series[slow.job.pid][-n:]
    others = [s[-n:] for pid, s in series.items() if pid != slow.job.pid]
    return share_true(median(o[i] for o in others) - mine[i] >= MOST for i in range(n))


def _comm_series(ctx: Context) -> list[float]:
    rows = ctx.job.steps.rows if ctx.job else ()
    return [comm[0] if (comm := comm_share_of(row)) else 0.0 for row in rows]
