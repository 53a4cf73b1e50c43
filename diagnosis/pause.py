"""Ranks waiting in a collective for a peer that is busy elsewhere, before it counts as a stall.

A checkpoint written by rank 0 while the others wait in a barrier, an evaluation on one rank,
a rank its quota holds back: the others sit in the collective for as long as that rank works
elsewhere.  The time they spend there is the late rank's, never the network's.  Past the stall
limit (10 s, or five median steps) the hang reading names it (diagnosis/hang.py); before it, from
the moment the monitor asks the silent ranks for their stacks (half the limit), the same
reading is had, and said as what it is: a pause, the job held back by one rank, with the
collective the others wait in, how long, and where the late rank is (its stack).
"""

from __future__ import annotations

from collections.abc import Sequence

from traintop.collectors import stall
from traintop.collectors.snapshot import JobSnapshot
from traintop.diagnosis.hang import classify
from traintop.diagnosis.hang_words import limit
from traintop.diagnosis.model import LIVE_STATES, Evidence, Finding, Hang, Straggler
from traintop.diagnosis.text import duration, rank_list

CONFIDENCE = 0.9  # the ledgers say who is in the collective; the stack says where the late one is
REMEDIES = (
    "move the late rank's work out of the others' way: checkpoint asynchronously "
    "(torch.distributed.checkpoint.async_save) or from every rank's own shard, evaluate on a "
    "separate process",
    "if the rank's quota, cpuset or device is what slows it, give it its peers'",
)


def pause_of(ranks: Sequence[JobSnapshot]) -> Hang | None:
    """Ranks waiting in a collective that others have not entered, no rank having stepped for
    half the stall limit (and not yet the limit: then it is a hang)."""
    running = [r for r in ranks if r.state in LIVE_STATES]
    ages = [r.last_step_age_s for r in running]
    if len(running) < 2 or None in ages:
        return None
    for_s = min(a for a in ages if a is not None)
    stall_after = max(limit(r, stall.STALL) for r in running)
    if not stall.capture_after_s(stall_after) <= for_s < stall_after:
        return None
    case = classify(ranks, "stalled", for_s, ended=False)
    return case if case.kind == "not_entered" and case.missing and case.inside else None


def pause_finding(pause: Hang) -> tuple[Finding, Straggler]:
    """The ``straggler`` finding naming the late rank(s), and the straggler itself."""
    late = [p for p in pause.ranks if p.rank in pause.missing]
    who = f"Rank {rank_list([p.rank for p in late])}"
    waiting = f"rank{'s' if len(pause.inside) > 1 else ''} {rank_list(list(pause.inside))}"
    what = f"{pause.op} #{pause.seq}" if pause.op else "a collective"
    summary = (f"{who} holds back the job: {waiting} wait in {what} for it, "
               f"{duration(pause.waited_s or pause.for_s)} so far")  # fmt: skip
    lines = (pause.summary, *pause.evidence[1:],
             "a wait for a busy peer: not the network")  # fmt: skip
    finding = Finding(
        bottleneck="straggler",
        confidence=CONFIDENCE,
        severity="warning",
        summary=summary,
        evidence=tuple(Evidence(line, "pause_s", pause.for_s, "training") for line in lines),
        remedies=REMEDIES,
        share=1.0,
    )
    first = late[0]
    text = f"rank {first.rank} (pid {first.pid}) holds back the job: {pause.summary}"
    return finding, Straggler(first.rank, first.pid, 1.0, text)
