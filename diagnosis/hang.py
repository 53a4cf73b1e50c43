"""A job that stopped stepping: stalled or hung, which kind, which ranks, and where they are.

Every rank writes the collectives it enters into its ledger (traintop/ledger.py), and a rank
that stopped stepping is asked for its stack (collectors/stacks.py).  From those, for a job none
of whose ranks finished a step for its stall limit (collectors/stall.py):

* ``dead_rank``: a rank's process is gone and the others wait for it;
* ``no_collective``: no rank is in a collective (a data or compute hang);
* ``desync``: the ranks are in collectives that differ (op, sequence or shapes);
* ``not_entered``: some ranks never reached the collective the others wait in;
* ``not_finished``: every rank entered it and none left (the link, or a peer's device).

A job that ended with its collectives raising (gloo notices a dead peer at once, where NCCL
waits for its timeout) gets the same reading after the fact (``crash_of``): the rank that went
first, or the ranks whose collectives differed.  Pure functions over snapshots.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from traintop.collectors import stall
from traintop.collectors.snapshot import Collective, JobSnapshot
from traintop.diagnosis.model import LIVE_STATES, Hang, RankHang
from traintop.diagnosis.stack_text import fold, fold_line, where
from traintop.diagnosis.text import duration, rank_list

Key = tuple[str, int, str, str]  # group, seq, op, shape
BACKWARD_NOTE = (
    "the wait at the end of backward is for DDP's (or FSDP's) gradient all-reduces, which are "
    "issued from C++: no Python hook sees each bucket, so the ledger times the wait, not them"
)


def hang_of(ranks: Sequence[JobSnapshot]) -> Hang | None:
    """The hang of a running job, once none of its ranks stepped for its stall limit."""
    running = [r for r in ranks if r.state in LIVE_STATES]
    ages = [r.last_step_age_s for r in running]
    if not running or None in ages:
        return None
    for_s = min(ages)  # type: ignore[type-var]
    stall_after = max(_limit(r, stall.STALL) for r in running)
    if for_s < stall_after:
        return None
    level = "hung" if for_s >= max(_limit(r, stall.HANG) for r in running) else "stalled"
    return classify(ranks, level, for_s, ended=False)


def crash_of(ranks: Sequence[JobSnapshot]) -> Hang | None:
    """What an ended job's collectives say of its end: None unless one of them raised."""
    if not any(_raised(r) is not None for r in ranks):
        return None
    ages = [r.last_step_age_s for r in ranks if r.last_step_age_s is not None]
    return classify(ranks, "crashed", min(ages, default=0.0), ended=True)


def _limit(rank: JobSnapshot, default: stall.Threshold) -> float:
    """The rank's own limit (set by the collector), else the default for its median step."""
    own = rank.stall_after_s if default is stall.STALL else rank.hang_after_s
    return own if own is not None else default.after_s(rank.step_time_p50_s)


def current(rank: JobSnapshot) -> Collective | None:
    """The collective a rank is in: its ledger's open entry (the newest if several), else
    the oldest the flight recorder holds unfinished (NCCL: the call returned, the GPU waits)."""
    inside = [c for c in rank.collectives if c.inside]
    if inside:
        return min(inside, key=lambda c: c.age_s)
    pending = rank.stack.pending if rank.stack is not None else ()
    return max(pending, key=lambda c: c.age_s) if pending else None


def _raised(rank: JobSnapshot) -> Collective | None:
    """An ended rank's newest collective when it raised (or never returned)."""
    newest = max(rank.collectives, key=lambda c: -c.age_s, default=None)
    return newest if newest is not None and (newest.raised or newest.inside) else None


def key_of(c: Collective) -> Key:
    return (c.group, c.seq, c.op, c.shape)


def classify(ranks: Sequence[JobSnapshot], level: str, for_s: float, ended: bool) -> Hang:
    """The kind of hang ``ranks`` are in, with every rank's place and the folded stacks."""
    final = {r.rank: (_raised(r) if ended else current(r)) for r in ranks}
    gone = [r for r in ranks if (final[r.rank] is None if ended else r.state not in LIVE_STATES)]
    inside = {r.rank: final[r.rank] for r in ranks if final[r.rank] is not None and r not in gone}
    keys = Counter(key_of(c) for c in inside.values())
    main = _main(keys, inside)
    members = [r for r in ranks if r not in gone and _member(r, main, len(ranks))]
    kind = _kind(gone, inside, keys, members, main)
    places = tuple(_place(r, final[r.rank], main, kind, r in gone, ended) for r in ranks)
    return _hang(level, kind, for_s, ranks, places, main, inside, keys)


def _main(keys: Counter[Key], inside: dict[int, Collective]) -> Collective | None:
    """The collective most ranks are in (the longest wait among equals)."""
    if not keys:
        return None
    top = max(keys.values())
    candidates = [c for c in inside.values() if keys[key_of(c)] == top]
    return max(candidates, key=lambda c: c.age_s)


def _member(rank: JobSnapshot, main: Collective | None, world: int) -> bool:
    """Whether ``rank`` belongs to ``main``'s group: every rank when the group spans the
    job, else the ranks whose ledger knows the group."""
    if main is None or main.group_size >= world:
        return True
    return any(c.group == main.group for c in rank.collectives)


def _kind(gone: list, inside: dict, keys: Counter, members: list, main: Collective | None) -> str:
    if not inside and all(r.collectives_total is None for r in members):
        return "unknown"
    if gone:
        return "dead_rank"
    if not inside:
        return "no_collective"
    if len(keys) > 1:
        return "desync"
    if any(r.rank not in inside for r in members) and main is not None:
        return "not_entered"
    return "not_finished"


def _place(rank: JobSnapshot, c: Collective | None, main: Collective | None, kind: str,
           gone: bool, ended: bool) -> RankHang:  # fmt: skip
    """One rank's state and the words for it."""
    stack = rank.stack
    frames, source = (stack.frames, stack.source) if stack is not None else ((), "")
    fell = _raised(rank) if gone else None
    if fell is not None:
        state, text = "failed", f"failed in {_named(fell)}, then {rank.state}"
    elif gone:
        state, text = "gone", f"gone ({rank.state})"
    elif c is not None and main is not None and key_of(c) == key_of(main):
        state, text = "inside", f"{_in(c, ended)} {_named(c)}{_for(c, ended)}"
    elif c is not None:
        state, text = "elsewhere", f"{_in(c, ended)} {_named(c)} ({c.group}){_for(c, ended)}"
    else:
        last = _last_in(rank, main)
        state = "outside"
        text = f"not entered (last #{last.seq})" if last and kind == "not_entered" else (
            "not entered" if kind == "not_entered" else "in no collective")  # fmt: skip
    return RankHang(rank.rank, rank.pid, state, text, c or _last_in(rank, main), frames, source)


def _in(c: Collective, ended: bool) -> str:
    """How a rank is in its collective: waiting, or (an ended job) failed or died in it."""
    if not ended:
        return "in"
    return "failed in" if c.raised else "died in"


def _for(c: Collective, ended: bool) -> str:
    return "" if ended else f" for {duration(c.age_s)}"


def _last_in(rank: JobSnapshot, main: Collective | None) -> Collective | None:
    if main is None:
        return None
    return next((c for c in rank.collectives if c.group == main.group), None)


def _named(c: Collective) -> str:
    return f"{c.op} #{c.seq}"


def _hang(level: str, kind: str, for_s: float, ranks: Sequence[JobSnapshot],
          places: tuple[RankHang, ...], main: Collective | None, inside: dict,
          keys: Counter) -> Hang:  # fmt: skip
    """Put the case together: its summary, its evidence, the folded stacks."""
    if main is None:
        in_main: tuple[int, ...] = ()
        waited = None
    else:
        in_main = tuple(sorted(r for r, c in inside.items() if key_of(c) == key_of(main)))
        waited = max(c.age_s for r, c in inside.items() if r in in_main)
    missing = tuple(p.rank for p in places if p.rank not in in_main)
    folds = fold([(p.rank, p.frames) for p in places])
    evidence = [_silence(ranks, for_s, level)]
    evidence += [fold_line(f) for f in folds] + _site_lines(places)
    if kind == "unknown":
        evidence += [_phase(r) for r in ranks if r.state in LIVE_STATES]
    if main is not None and main.group == "backward":
        evidence.append(BACKWARD_NOTE)
    timeout = main.timeout_s if main is not None else None
    if level != "crashed" and timeout is not None and waited is not None:
        left = max(0.0, timeout - waited)
        evidence.append(f"the group's timeout ({duration(timeout)}) ends the wait in "
                        f"{duration(left)}")  # fmt: skip
    shapes = sorted({k[3] for k in keys if main is not None and k[:2] == key_of(main)[:2]})
    return Hang(
        level=level,
        kind=kind,
        for_s=for_s,
        summary=_summary(kind, places, main, in_main, missing, inside, ranks),
        group=main.group if main else None,
        seq=main.seq if main else None,
        op=main.op if main else None,
        shapes=tuple(shapes),
        inside=in_main,
        missing=missing,
        waited_s=waited,
        timeout_s=timeout,
        ranks=places,
        folds=folds,
        evidence=tuple(evidence),
    )


def _site_lines(places: tuple[RankHang, ...]) -> list[str]:
    """Ranks with no stack: where their ledger says they called their collective."""
    bare = [p for p in places if not p.frames and p.collective is not None and p.collective.site]
    lines: dict[str, list[int]] = {}
    for p in bare:
        c = p.collective
        lines.setdefault(f"{c.op} #{c.seq} called at {c.site.replace(':', ' ', 1)}", []).append(
            p.rank
        )
    return [f"rank {rank_list(rs)} (its ledger): {text}" for text, rs in lines.items()]


def _summary(kind: str, places: tuple[RankHang, ...], main: Collective | None,
             in_main: tuple[int, ...], missing: tuple[int, ...], inside: dict,
             ranks: Sequence[JobSnapshot]) -> str:  # fmt: skip
    who = {p.rank: p for p in places}
    if kind == "unknown":
        return "no collective ledger (an older traintop wrote these rings); " + "; ".join(
            _phase(r) for r in ranks if r.state in LIVE_STATES)  # fmt: skip
    if kind == "no_collective":
        first = places[0]
        return f"no rank is in a collective (a data or compute hang); {_at(first)}"
    if kind == "dead_rank":
        return _dead(places, main, in_main)
    if kind == "desync":
        parts = [f"{_ranks_word(sorted(r for r, c in inside.items() if key_of(c) == k))} in "
                 f"{k[2]} #{k[1]} ({k[0]}{', ' + k[3] if k[3] else ''})"
                 for k in sorted({key_of(c) for c in inside.values()})]  # fmt: skip
        outside = [p for p in places if p.state == "outside"]
        parts += [_at(p) for p in outside[:3]]
        return "the ranks are in collectives that differ: " + "; ".join(parts) + (
            " (the code took different paths)")  # fmt: skip
    shape = f", {main.shape}" if main.shape else ""
    if kind == "not_finished":
        return (f"every rank entered {_named(main)} ({main.group}{shape}) and none left: "
                "the link or a peer's device")  # fmt: skip
    late = [r for r in missing if who[r].state == "outside"]
    odd = "; ".join(_at(who[r]) for r in late[:3])
    return (f"{_ranks_word(late)} never reached {_named(main)} ({main.group}{shape}) that "
            f"{_ranks_word(in_main)} wait in for {duration(main.age_s)}; {odd}")  # fmt: skip


def _silence(ranks: Sequence[JobSnapshot], for_s: float, level: str) -> str:
    """ "no rank finished a step for 43s (stalled after 10s, hung after 1m00s)"."""
    running = [r for r in ranks if r.state in LIVE_STATES]
    if level == "crashed" or not running:
        return f"the job ended {duration(for_s)} after its last step"
    stall_after = max(_limit(r, stall.STALL) for r in running)
    hang_after = max(_limit(r, stall.HANG) for r in running)
    return (f"no rank finished a step for {duration(for_s)} (stalled after "
            f"{duration(stall_after)}, hung after {duration(hang_after)})")  # fmt: skip


def _dead(places: tuple[RankHang, ...], main: Collective | None, in_main: tuple[int, ...]) -> str:
    """ "rank 3 gone (finished); ranks 0, 2 failed in all_reduce #32 and ended; rank 1 waits
    in it": who went first, who fell with the collective, who still waits."""
    first = [p for p in places if p.state == "gone"]
    fell = [p.rank for p in places if p.state == "failed"]
    parts = [f"{_ranks_word([p.rank for p in first])} {', '.join(sorted({p.text for p in first}))}"
             ] if first else []  # fmt: skip
    if main is None:
        return "; ".join([*parts, "the others wait"])
    what = f"{_named(main)} ({main.group})"
    if fell:
        parts.append(f"{_ranks_word(fell)} failed in {what} and ended")
    if in_main:
        verb = "failed in" if main.raised else "wait in"
        parts.append(f"{_ranks_word(in_main)} {verb} {'it' if fell else what}")
    return "; ".join(parts)


def _phase(rank: JobSnapshot) -> str:
    """ "rank 0 in backward for 42s" from the live word, for ranks with no ledger."""
    if rank.live_phase is None or rank.live_phase_s is None:
        return f"rank {rank.rank} in an unknown phase"
    return f"rank {rank.rank} in {rank.live_phase} for {duration(rank.live_phase_s)}"


def _at(place: RankHang) -> str:
    """ "rank 2 is at train.py:88 in log_metrics: time.sleep(600)" (or what its ledger says)."""
    if place.frames:
        return f"rank {place.rank} is in {where(place.frames)}"
    return f"rank {place.rank}: no stack yet"


def _ranks_word(ranks: Sequence[int]) -> str:
    ranks = list(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_list(ranks)}"
