"""One constructor for rule results and one ranking, so every rule is scored the same way.

A rule claims the share of time its cause explains (``lost``); confidence comes from that share
and from how steadily the cause held over the window, never from a constant of the rule.  The
ranking puts the largest claim first, and between claims close enough to be the same within the
window's noise it prefers the more specific cause in a fixed order, so the same job does not get
one answer on one run and the other on the next (docs/diagnosis.md, "Ranking").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from traintop.diagnosis.context import Context
from traintop.diagnosis.gain_text import ordered
from traintop.diagnosis.gains import NOT_MODELLED, unmodelled
from traintop.diagnosis.model import SEVERITIES, Candidate, Evidence, Finding, Gain
from traintop.diagnosis.stats import clamp01

CONFIDENCE_CAP = 0.95  # nothing measured from outside the process is certain
FULL_SHARE = 0.5  # a cause explaining half the time is as clear as a share can make it
NEAR = 0.7  # a claim this close to the largest (ratio) is a near tie
NEAR_MIN = 0.05  # ... among claims worth a twentieth of the time at least
# Near ties go to the earlier id: the cause a user can act on most directly first, the residual
# explanations ("neither CPU nor storage", "long steps") last.
PREFERENCE: tuple[str, ...] = (
    "hang",
    "straggler",
    "data_io",
    "data_handoff",
    "data_cpu",
    "throttle_thermal",
    "throttle_power",
    "host_memory",
    "memory",
    "network",
    "oversubscribed",
    "gil_contention",
    "host_overhead",
    "sync_stall",
    "data_starved",
    "periodic_stall",
    "idle",
    "compute",
    "unknown",
)


def confidence(coverage: float, explained: float, steady: float, certainty: float = 1.0) -> float:
    """How sure a finding is: the share of time it explains (full at ``FULL_SHARE``), how
    steadily it held over the window (0..1: half the weight), how complete its evidence is
    (``certainty``: a guess in system mode is less) and the window's coverage."""
    weight = 0.5 + 0.5 * min(1.0, max(0.0, explained) / FULL_SHARE)
    steadiness = 0.5 + 0.5 * clamp01(steady)
    return round(clamp01(CONFIDENCE_CAP * coverage * certainty * weight * steadiness), 2)


def candidate(
    ctx: Context,
    bottleneck: str,
    *,
    severity: str,
    summary: str,
    evidence: Iterable[Evidence],
    remedies: Iterable[str | Gain] | Callable[[], Iterable[str | Gain]],
    lost: float,
    steady: float = 1.0,
    explained: float | None = None,
    certainty: float = 1.0,
) -> Candidate:
    """Wrap a rule's result: ``lost`` is the share of time it claims (what ranks it);
    ``explained`` the share its evidence accounts for where that is not a time loss (a healthy
    device's busy share, a full card), else ``lost``; ``steady`` how steadily it held.  The
    remedies come ordered by what they are predicted to buy (a bare text has no figure), once
    the finding is kept (:func:`with_fixes`): most of a multi-rank job's findings are not;
    given as a function, they are not even made before."""
    share = clamp01(lost)
    clear = share if explained is None else explained
    finding = Finding(
        bottleneck=bottleneck,
        confidence=confidence(ctx.coverage, clear, steady, certainty),
        severity=severity,
        summary=summary,
        evidence=tuple(evidence),
        share=share,
    )
    fixes = remedies if callable(remedies) else (lambda made=tuple(remedies): made)
    return Candidate(finding=finding, lost_share=share, fixes=fixes)


def with_fixes(c: Candidate) -> Candidate:
    """``c`` with its remedies made, where they were left for when it is kept."""
    if c.fixes is None:
        return c
    return Candidate(_with_remedies(c.finding, c.fixes()), c.lost_share)


def _with_remedies(finding: Finding, remedies: Iterable[str | Gain]) -> Finding:
    gains = ordered(_gains(remedies))
    return replace(finding, remedies=tuple(g.remedy for g in gains), gains=gains)


def _gains(remedies: Iterable[str | Gain]) -> list[Gain]:
    """One prediction per remedy, each text once (the first prediction made for it)."""
    found: dict[str, Gain] = {}
    for gain in unmodelled(remedies, NOT_MODELLED):
        found.setdefault(gain.remedy, gain)
    return list(found.values())


def rank_key(c: Candidate) -> tuple[float, int, float]:
    """Biggest claimed share of time first; severity, then confidence break exact ties."""
    f = c.finding
    return (c.lost_share, SEVERITIES.index(f.severity), f.confidence)


def near(runner_up: Candidate, top: Candidate) -> bool:
    """Whether two claims are too close to tell apart on one window."""
    return top.lost_share >= NEAR_MIN and runner_up.lost_share >= NEAR * top.lost_share


def ranked(found: Iterable[Candidate]) -> tuple[Candidate, ...]:
    """Candidates worst first; among those near the largest claim, the preferred cause."""
    order = sorted(found, key=rank_key, reverse=True)
    tied = [c for c in order if near(c, order[0])]
    if len(tied) < 2:
        return tuple(order)
    head = min(tied, key=_preference)
    return (head, *(c for c in order if c is not head))


def _preference(c: Candidate) -> int:
    name = c.finding.bottleneck
    return PREFERENCE.index(name) if name in PREFERENCE else len(PREFERENCE)
