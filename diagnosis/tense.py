"""Ended jobs speak in the past tense: "stopped by SIGTERM 14:02: was compute: ...".

An ended run keeps its final verdict so the user can still read why it was slow, but it is
history: it is never presented as what is happening now, and it carries how and when it ended
so nobody mistakes it for the job that runs now.  What it "was" is what explained most of its
time while it ran (``diagnosis/life_tally.py``), not a new reading of its last seconds.
"""

from __future__ import annotations

import time
from dataclasses import replace

from traintop.diagnosis.model import Evidence, Finding

DAY_S = 86400.0


def clock(at: float | None, now: float) -> str:
    """An end time as people read it: ``14:02`` today, with the date when older than a day."""
    if at is None:
        return "at an unknown time"
    stamp = time.localtime(at)
    if now - at >= DAY_S:
        return time.strftime("%Y-%m-%d %H:%M", stamp)
    return time.strftime("%H:%M", stamp)


RING_ONLY = " (from its step records alone: its processes were not seen running)"
NEVER_STEPPED = "before its first step"  # an ended run that never stepped has no last numbers


def past(
    finding: Finding,
    state: str,
    ended_at: float | None,
    now: float,
    *,
    ring_only: bool = False,
    how: str = "",
    facts: tuple[Evidence, ...] = (),
) -> Finding:
    """``finding`` restated as the final word on a job that ``state`` (finished, crashed,
    stopped, gone, restarted) ``how`` ("by SIGTERM", "(ValueError)") at ``ended_at``, with
    ``facts`` (how it ended, how long the finding held) first in its evidence; ``ring_only``
    says the host side of the case is unknown (a job that ended before traintop watched it:
    "with CPU to spare" was never measured)."""
    when = f"{state} {how} {clock(ended_at, now)}" if how else f"{state} {clock(ended_at, now)}"
    note = RING_ONLY if ring_only else ""
    if facts:
        finding = replace(finding, evidence=(*facts, *finding.evidence))
    if finding.bottleneck == "hang":  # its ledgers say how it ended: no host side to miss
        return replace(finding, summary=f"{when}: {finding.summary}")
    if finding.bottleneck == "unknown" and finding.summary.startswith(NEVER_STEPPED):
        return replace(finding, summary=f"{when}: {finding.summary}")
    if finding.bottleneck == "unknown":
        return replace(finding, summary=f"{when}: no bottleneck found in its last numbers{note}")
    return replace(finding, summary=f"{when}: was {finding.bottleneck}: {finding.summary}{note}")
