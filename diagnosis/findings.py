"""One constructor for rule results, so confidence is scaled the same way everywhere."""

from __future__ import annotations

from collections.abc import Iterable

from traintop.diagnosis.context import Context
from traintop.diagnosis.model import SEVERITIES, Candidate, Evidence, Finding
from traintop.diagnosis.stats import clamp01


def candidate(
    ctx: Context,
    bottleneck: str,
    *,
    strength: float,
    severity: str,
    summary: str,
    evidence: Iterable[Evidence],
    remedies: Iterable[str],
    lost: float,
) -> Candidate:
    """Wrap a rule's result: ``strength`` is how clearly the signals hold (0..1) and is
    scaled by the window's coverage; ``lost`` is the estimated share of time it costs."""
    finding = Finding(
        bottleneck=bottleneck,
        confidence=round(clamp01(strength * ctx.coverage), 2),
        severity=severity,
        summary=summary,
        evidence=tuple(evidence),
        remedies=tuple(remedies),
    )
    return Candidate(finding=finding, lost_share=clamp01(lost))


def rank_key(c: Candidate) -> tuple[float, int, float]:
    """Biggest estimated share of step time lost first; severity, then confidence break ties."""
    f = c.finding
    return (c.lost_share, SEVERITIES.index(f.severity), f.confidence)


def ranked(found: Iterable[Candidate]) -> tuple[Candidate, ...]:
    """Candidates worst first."""
    return tuple(sorted(found, key=rank_key, reverse=True))
