"""One verdict per job: every rank diagnosed by the rules, folded into the job's finding.

A live job is judged on the whole box as it is now (its GPUs, its processes, the host), with
the other live jobs' processes visible (they compete for the same CPUs) and ended runs left out.
An ended job is judged on its own ring numbers only: its processes are gone and the GPUs it
used now belong to someone else, so host-side evidence would describe the present, not it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace

from traintop.collectors.snapshot import JobSnapshot, Snapshot
from traintop.diagnosis.context import Box, Context, RankResult, box_of, context_for, span_trust
from traintop.diagnosis.explain import explain
from traintop.diagnosis.findings import near, ranked, with_fixes
from traintop.diagnosis.fold import fold
from traintop.diagnosis.hang import crash_of, hang_of
from traintop.diagnosis.hang_finding import beside
from traintop.diagnosis.hang_finding import finding as hang_finding
from traintop.diagnosis.job_groups import JobGroup, settled
from traintop.diagnosis.memo import Memo, Window
from traintop.diagnosis.model import (
    Candidate,
    Evidence,
    Finding,
    Hang,
    JobSummary,
    JobVerdict,
    RankTime,
    Straggler,
)
from traintop.diagnosis.pause import pause_finding, pause_of
from traintop.diagnosis.rules_job import pause_phase
from traintop.diagnosis.run_life import (
    ending_evidence,
    how,
    job_ending,
    post_mortem_due,
    starting_finding,
)
from traintop.diagnosis.straggler_cause import what_slows
from traintop.diagnosis.tense import NEVER_STEPPED, clock, past
from traintop.diagnosis.text import duration, pct
from traintop.diagnosis.where import pause_wish, sample_wish

Rules = Callable[[Context], tuple[Candidate, ...]]
LEADS = frozenset({"straggler"})  # findings whose followers explain them, not compete with them


def summary_of(job: JobSnapshot) -> JobSummary:
    return JobSummary(
        job.pid,
        job.name,
        job.steps_per_s,
        job.samples_per_s,
        job.data_wait_share,
        job.job_id,
        job.rank,
        job.state,
    )


def judge(box: Box, group: JobGroup, rules: Rules, now: float | None = None) -> JobVerdict:
    """The verdict on one job from ``box``: its ranks' findings folded, ``unknown`` explained;
    a job that has not stepped yet (``now``: the snapshot's wall clock) says where it is."""
    if group.state == "starting" or not any(r.steps_total for r in group.ranks):
        return _before_first_step(group, now)
    results = [RankResult(r, ctx := context_for(box, r), rules(ctx)) for r in group.ranks]
    found, straggler = fold(results)
    kept = _split_stated(found)
    findings = tuple(with_fixes(c).finding for c in kept) or (_explained(results, straggler),)
    lost = found[0].lost_share if found else 0.0
    hang = _stopped(group)
    if hang is not None:  # a stopped job: nothing it measured before matters as much
        findings, lost = (hang_finding(hang), *beside(findings)), 1.0
    elif group.live and (pause := pause_of(group.ranks)) is not None:
        held, straggler = pause_finding(pause)  # ranks wait for one busy elsewhere
        findings, lost = (held, *beside(findings)), 1.0
    return _verdict(
        group,
        findings,
        lost,
        hang,
        straggler=straggler,
        budget=tuple(t for r in results if (t := rank_time(r)) is not None),
        sample=_sample_wish(results, straggler, findings[0]) if group.live and not hang else None,
    )


def _verdict(group: JobGroup, findings: Sequence[Finding], lost: float, hang: Hang | None,
             **more: object) -> JobVerdict:  # fmt: skip
    """The job's verdict from its findings, worst first; ``more``: further JobVerdict fields."""
    return JobVerdict(
        job_id=group.job_id,
        name=group.name,
        state=group.state,
        ranks=tuple(summary_of(r) for r in group.ranks),
        primary=findings[0],
        also=tuple(findings[1:]),
        lost_share=lost,
        ended_at=group.ended_at,
        hang=hang,
        ending=job_ending(group.ranks),
        **more,  # type: ignore[arg-type]
    )


def _stopped(group: JobGroup) -> Hang | None:
    """A running job's hang; an ended one's post-mortem when a rank failed (a job stopped by a
    signal in a barrier did not end because of its collectives: ``post_mortem_due``)."""
    if group.live:
        return hang_of(group.ranks)
    return crash_of(group.ranks) if post_mortem_due(group.state) else None


def _before_first_step(group: JobGroup, now: float | None) -> JobVerdict:
    """A job none of whose ranks has stepped: starting (where it is), or ended before its
    first step (its ranks' hang, where one is blocked past the limit, comes first)."""
    hang = hang_of(group.ranks) if group.live else None
    if group.live:
        primary = starting_finding(group.ranks, now)
    else:
        primary = Finding("unknown", 0.0, "info", f"{NEVER_STEPPED}{_after(group)}")
    findings = (hang_finding(hang), primary) if hang is not None else (primary,)
    return _verdict(group, findings, 1.0 if hang is not None else 0.0, hang)


def _after(group: JobGroup) -> str:
    """ ", 1m25s after it started" for an ended run that never stepped."""
    starts = [r.started_at for r in group.ranks if r.started_at is not None]
    if group.ended_at is None or not starts:
        return ""
    return f", {duration(group.ended_at - min(starts))} after it started"


def _sample_wish(
    results: Sequence[RankResult], straggler: Straggler | None, primary: Finding
) -> tuple[int, str] | None:
    """Whose stacks would place the time this answer cannot: the straggler's own time, the
    rank ``unknown`` explains (the same rank :func:`_explained` picks), or the pauses of the
    rank whose periodic long steps cost the most (what they are picks their remedy)."""
    if primary.bottleneck == "periodic_stall":
        return _pause_wish(results)
    if primary.bottleneck not in ("straggler", "unknown"):
        return None
    pick = next((r for r in results if straggler and r.job.pid == straggler.pid), results[0])
    return sample_wish(pick.ctx, own_time=primary.bottleneck == "straggler")


def _pause_wish(results: Sequence[RankResult]) -> tuple[int, str] | None:
    """The phase of the periodic pauses of the rank that loses most to them, to sample."""
    found = [(c.lost_share, r) for r in results for c in r.found
             if c.finding.bottleneck == "periodic_stall"]  # fmt: skip
    if not found:
        return None
    rank = max(found, key=lambda pair: pair[0])[1]
    budget = rank.ctx.job.budget if rank.ctx.job else None
    excess = budget.excess if budget is not None else None
    phase = pause_phase(excess, budget.waits) if budget is not None and excess else None
    return pause_wish(rank.ctx, phase) if phase else None


def _split_stated(found: tuple[Candidate, ...]) -> tuple[Candidate, ...]:
    """Two causes that explain nearly the same time are both the answer: the primary says so,
    with the split, so that a reader (and the next run) sees both.  A straggler's followers
    are its own cause, quoted in its evidence: not a second answer."""
    if len(found) < 2 or not near(found[1], found[0]) or found[0].finding.bottleneck in LEADS:
        return found
    head, second = found[0], found[1]
    # the preferred cause may lead with less: then the other claims more, too close to tell
    much = "nearly as much" if second.lost_share <= head.lost_share else "as much or more"
    text = (
        f"{second.finding.bottleneck} explains {much}: {pct(second.lost_share)} of "
        f"time against {pct(head.lost_share)}"
    )
    fact = Evidence(text, "near_share", second.lost_share, "training")
    finding = replace(head.finding, evidence=(*head.finding.evidence, fact))
    return (replace(head, finding=finding), *found[1:])


def rank_time(result: RankResult) -> RankTime | None:
    """One rank's time budget: its phases and its long steps' excess, by phase."""
    budget = result.ctx.job.budget if result.ctx.job is not None else None
    if budget is None:
        return None
    excess = budget.excess
    return RankTime(
        rank=result.job.rank,
        pid=result.job.pid,
        phases=tuple((name, round(share, 3)) for name, share in budget.shares.items()),
        long_steps=excess.count if excess else 0,
        excess=tuple((n, round(v, 3)) for n, v in excess.by_phase.items()) if excess else (),
    )


def _explained(results: Sequence[RankResult], straggler: Straggler | None) -> Finding:
    """No rule holds: the explanation for the straggler, else for the lowest rank."""
    pick = next((r for r in results if straggler and r.job.pid == straggler.pid), results[0])
    finding = explain(pick.ctx)
    if straggler is None:
        return finding
    fact = Evidence(straggler.text, "straggler_gap", straggler.gap, "training")
    return replace(finding, evidence=(fact, *what_slows(pick, results), *finding.evidence))


def judge_live(window: Window, groups: Sequence[JobGroup], rules: Rules):
    """Verdicts on the live jobs, worst first, and the box they were judged on."""
    pids = frozenset(pid for g in groups for pid in g.pids)
    box = box_of(window, tuple(j for j in window.latest.snap.jobs if j.pid in pids))
    now = window.latest.snap.timestamp
    verdicts = [judge(box, g, rules, now) for g in groups]
    return tuple(sorted(verdicts, key=_worst, reverse=True)), box


def _worst(v: JobVerdict) -> tuple[float, int]:
    """Most step time lost first; a job with a warning before a healthy one at equal loss."""
    return (v.lost_share, 0 if v.primary.severity == "ok" else 1)


def judge_ended(
    window: Sequence[Snapshot], groups: Sequence[JobGroup], rules: Rules, memo: Memo
) -> tuple[JobVerdict, ...]:
    """The final word on each ended job, from its last ring numbers alone (the collector
    measures an ended job up to its last step, so the newest summary is its final one), in the
    past tense.  One two-sample ring-only box spanning the window serves them all, and a
    verdict is kept (``memo``) while its key holds: a sweep leaves dozens of ended runs behind,
    and they come back unchanged on every tick."""
    if not groups:
        return ()
    pids = frozenset(pid for g in groups for pid in g.pids)
    ended = tuple(j for j in window[-1].jobs if j.pid in pids)
    now = window[-1].timestamp
    boxes: list[Box] = []  # the ring-only box, built only if a verdict is not kept

    def fresh(i: int) -> JobVerdict:
        if not boxes:
            boxes.append(_ring_box(window, ended))
        return _in_past(judge(boxes[0], groups[i], rules), groups[i], now)

    keys = _ended_keys(window, ended, groups, now)
    kept = memo.verdicts(keys, fresh)
    return tuple(map(_ended_as_of, kept, groups))


def _ended_keys(
    window: Sequence[Snapshot], ended: Sequence[JobSnapshot], groups: Sequence[JobGroup],
    now: float,
) -> list[tuple[Hashable, object] | None]:  # fmt: skip
    """Each ended job's slot (its id and first pid) and what its verdict is made of: its
    ranks' final numbers, what the ring-only box knows besides (the CPUs, how many ranks are on
    it, the window's length as far as it reaches a confidence) and its end time as written.
    Ranks whose pid another ended rank repeats read each other's samples (the box finds them
    by pid): those are judged afresh (``None``)."""
    span = window[-1].monotonic - window[0].monotonic
    facts = (max(1, window[-1].host.logical_cpus), max(1, len(ended)), span_trust(span))
    shared = _shared_pids(ended)
    return [
        None
        if shared and shared & g.pids
        else ((g.job_id, g.ranks[0].pid), (settled(g.ranks), facts, clock(g.ended_at, now)))
        for g in groups
    ]


def _shared_pids(jobs: Sequence[JobSnapshot]) -> set[int]:
    """Pids that more than one of ``jobs`` carries."""
    counts = Counter(j.pid for j in jobs)
    return {pid for pid, n in counts.items() if n > 1}


def _ended_as_of(verdict: JobVerdict, group: JobGroup) -> JobVerdict:
    """A kept verdict with this tick's end time: a wall-clock stamp less an age measured on
    another clock, it moves by microseconds from tick to tick."""
    if verdict.ended_at == group.ended_at:
        return verdict
    return replace(verdict, ended_at=group.ended_at)


def _in_past(verdict: JobVerdict, group: JobGroup, now: float) -> JobVerdict:
    when = (group.state, group.ended_at, now)
    said = how(verdict.ending)
    facts = ending_evidence(group.ranks)
    return replace(
        verdict,
        primary=past(verdict.primary, *when, ring_only=True, how=said, facts=facts),
        also=tuple(past(f, *when, ring_only=True, how=said) for f in verdict.also),
    )


def _ring_box(window: Sequence[Snapshot], ended: tuple[JobSnapshot, ...]) -> Box:
    """The box of the ended jobs: two samples spanning ``window``, of their ring numbers alone
    (the host's CPU count kept)."""
    last = replace(
        window[-1], jobs=ended, processes=(), gpus=(), disks=(), nics=(), cpu=None, memory=None
    )
    ring = [replace(last, monotonic=window[0].monotonic), last]
    return box_of(Memo().window(ring), ended)


def ranked_rules(rule_table) -> Rules:
    """The engine's rules table as one function: every finding that holds, worst first."""

    def run(ctx: Context) -> tuple[Candidate, ...]:
        return ranked(c for _, rule in rule_table if (c := rule(ctx)))

    return run
