"""Fold the findings of a job's ranks into one verdict, naming the straggler when there is one.

In a synchronous job (DDP, FSDP) every rank steps at the pace of the slowest: the others finish
their own work and wait for it inside the collective.  So the ranks' findings are not
independent votes.  A rank that loses a large share of its step to a cause of its own (input,
host, a throttled GPU) while the others do not is the straggler, and the others' waiting
(communication, sync stalls) is its effect, not a second problem.  A rank that waits on its
peers far less than the others is the straggler too, even when its own cause is plain compute
(a slower GPU).  Only when the ranks look alike is the waiting itself the verdict (a slow link
makes every rank wait about equally).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from statistics import median

from traintop.diagnosis.context import RankResult
from traintop.diagnosis.findings import ranked
from traintop.diagnosis.model import Candidate, Evidence, Straggler
from traintop.diagnosis.rules_straggler import held_back
from traintop.diagnosis.signals import comm_share
from traintop.diagnosis.straggler_cause import what_slows
from traintop.diagnosis.text import pct, rank_list

STRAGGLER_GAP = 0.2  # a fifth of a step, the scale of the data-wait and communication rules
PEER_WAIT = frozenset({"network", "sync_stall"})  # what waiting on a straggler looks like
NO_COST = frozenset({"compute", "unknown"})  # findings that cost no measured share of a step
EVERY_RANK_PAYS = frozenset({"network"})  # a cost the least-paying rank bounds (the transfer)


def fold(results: Sequence[RankResult]) -> tuple[tuple[Candidate, ...], Straggler | None]:
    """The job's findings, worst first, and its straggler (None: the ranks look alike).  When
    the other ranks wait on the straggler for most of their step (timed collectives), the
    straggler is the job's finding and claims that wait
    (:mod:`traintop.diagnosis.rules_straggler`); its own findings follow it, since they claim
    the same time seen from its side.  Else its own cause is the job's, the straggler named
    first in its evidence."""
    if len(results) == 1:
        return results[0].found, None
    straggler = _by_own_loss(results) or _by_peer_wait(results)
    if straggler is None:
        return _merge(results), None
    slow = next(r for r in results if r.job.pid == straggler.pid)
    found = tuple(c for c in slow.found if c.finding.bottleneck not in PEER_WAIT)
    held = held_back(results, slow, straggler, found)
    if held is not None:
        return (held, *found), straggler
    found = _with_evidence(found, _straggler_evidence(straggler), what_slows(slow, results))
    return found, straggler


def _own_loss(result: RankResult) -> Candidate | None:
    """The worst finding a rank has on its own account (not waiting on peers, not free)."""
    skip = PEER_WAIT | NO_COST
    return next((c for c in result.found if c.finding.bottleneck not in skip), None)


def _loss_of(result: RankResult, bottleneck: str) -> float:
    found = (c for c in result.found if c.finding.bottleneck == bottleneck)
    return next((c.lost_share for c in found), 0.0)


def _by_own_loss(results: Sequence[RankResult]) -> Straggler | None:
    """The rank losing the most to a cause of its own, if the others lose far less to it."""
    losses = [(c, r) for r in results if (c := _own_loss(r)) is not None]
    if not losses:
        return None
    worst, slow = max(losses, key=lambda pair: pair[0].lost_share)
    name = worst.finding.bottleneck
    others = [_loss_of(r, name) for r in results if r is not slow]
    gap = worst.lost_share - median(others)
    if gap < STRAGGLER_GAP:
        return None
    text = (
        f"rank {slow.job.rank} (pid {slow.job.pid}) is the straggler: {name} costs it "
        f"{pct(worst.lost_share)} of its step, the other ranks {pct(median(others))}"
        " (they wait for it)"
    )
    return Straggler(slow.job.rank, slow.job.pid, gap, text)


def _by_peer_wait(results: Sequence[RankResult]) -> Straggler | None:
    """The rank that waits on its peers far less than they wait on it (timed collectives)."""
    waits = [(share[0], r) for r in results if (share := comm_share(r.ctx)) is not None]
    if len(waits) < 2:
        return None
    least, slow = min(waits, key=lambda pair: pair[0])
    others = median(w for w, r in waits if r is not slow)
    if others - least < STRAGGLER_GAP:
        return None
    text = (
        f"rank {slow.job.rank} (pid {slow.job.pid}) is the straggler: it waits on its peers "
        f"{pct(least)} of its step, the other ranks {pct(others)}"
    )
    return Straggler(slow.job.rank, slow.job.pid, others - least, text)


def _straggler_evidence(straggler: Straggler) -> Evidence:
    return Evidence(straggler.text, "straggler_gap", straggler.gap, "training")


def _with_evidence(
    found: tuple[Candidate, ...], first: Evidence, why: tuple[Evidence, ...] = ()
) -> tuple[Candidate, ...]:
    """Put ``first`` (and what slows the straggler, ``why``) before the primary's own evidence
    (nothing found: left to the caller)."""
    if not found:
        return found
    head = found[0]
    finding = replace(head.finding, evidence=(first, *why, *head.finding.evidence))
    return (replace(head, finding=finding), *found[1:])


def _merge(results: Sequence[RankResult]) -> tuple[Candidate, ...]:
    """Ranks that look alike: each bottleneck once, from the rank where it costs the most (the
    network: the least, :func:`_kept`), with the ranks it holds on."""
    best: dict[str, Candidate] = {}
    holds: dict[str, list[int]] = {}
    for result in results:
        for c in result.found:
            name = c.finding.bottleneck
            holds.setdefault(name, []).append(result.job.rank)
            if name not in best or _kept(name, c, best[name]):
                best[name] = c
    if "network" in best and _skewed(results, len(holds["network"])):
        del best["network"]
    total = len(results)
    return ranked(_on_ranks(best[n], holds[n], total) for n in best)


def _kept(name: str, c: Candidate, held: Candidate) -> bool:
    """Whether ``c`` stands for the job rather than ``held``: a slow link holds every rank in
    the collective for the transfer, the rank that arrives last too, so what the network costs
    the job is what it costs the rank that waits least; the others' extra wait is their peers'
    lateness.  Other causes cost the job what they cost its worst rank."""
    if name in EVERY_RANK_PAYS:
        return c.lost_share < held.lost_share
    return c.lost_share > held.lost_share


def _skewed(results: Sequence[RankResult], holding: int) -> bool:
    """Waiting that is skew, not the wire: a slow link holds every rank in the collective for
    the transfer, so the rank that waits least bounds what the link costs.  When a rank that
    times its collectives does not find the network (its wait, less the CPU queueing of the
    job's slowest rank, is under the rule's share), the others wait on it, not on the link
    (ranks out of step on a shared CPU, say)."""
    timed = sum(1 for r in results if comm_share(r.ctx) is not None)
    return timed > 1 and holding < timed


def _on_ranks(c: Candidate, ranks: list[int], total: int) -> Candidate:
    plural = "s" if len(ranks) > 1 else ""
    text = f"holds on rank{plural} {rank_list(ranks)} ({len(ranks)} of {total})"
    fact = Evidence(text, "ranks_holding", float(len(ranks)), "training")
    return replace(c, finding=replace(c.finding, evidence=(*c.finding.evidence, fact)))
