"""A job that stopped stepping: stalled or hung, which kind, which ranks, and where they are.

Every rank writes the collectives it enters into its ledger (traintop/ledger.py), and a rank
that stopped stepping is asked for its stack (collectors/stacks.py).  From those, for a job none
of whose ranks finished a step for its stall limit (collectors/stall.py):

* ``dead_rank``: a rank's process is gone and the others wait for it;
* ``no_collective``: no rank is in a collective (a data or compute hang);
* ``desync``: the ranks are in collectives that differ (op, sequence or shapes);
* ``not_entered``: some ranks never reached the collective the others wait in;
* ``not_finished``: every rank entered it and none left (the link, or a peer's device);
* ``stopped``: a rank's process is stopped (SIGSTOP, job control) or held by a debugger: the
  kernel says so (collectors/proc_state.py), and one ``kill -CONT`` resumes it.

What the kernel says of each rank comes first: a rank whose training thread is gone counts as
gone whatever its segment says, and a job whose ranks that the others wait for all burn their
CPU is ``busy``, never stalled or hung: it works, however long (an evaluation on rank 0 behind a
barrier).  A rank that waits for a batch names the DataLoader worker it waits on.

A job that ended with its collectives raising (gloo notices a dead peer at once, where NCCL
waits for its timeout) gets the same reading after the fact (``crash_of``): the rank that went
first, or the ranks whose collectives differed.  Pure functions over snapshots.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from traintop.collectors import stall
from traintop.collectors.loader_workers import waited_on
from traintop.collectors.proc_state import busy, dead, stopped
from traintop.collectors.snapshot import Collective, Frame, JobSnapshot, WorkerSnapshot
from traintop.diagnosis.hang_line import hang_line
from traintop.diagnosis.hang_words import (
    Case,
    Key,
    evidence,
    gone_text,
    key_of,
    limit,
    named,
    phase_place,
    proc_note,
    summary,
)
from traintop.diagnosis.model import LIVE_STATES, Hang, RankHang
from traintop.diagnosis.text import duration

THREAD_QUEUE = os.sep + "queue.py"  # the standard library's queue.Queue
PROCESS_QUEUE = os.path.join("multiprocessing", "queues.py")


def hang_of(ranks: Sequence[JobSnapshot]) -> Hang | None:
    """The hang of a running job, once none of its ranks stepped for its stall limit."""
    running = [r for r in ranks if r.state in LIVE_STATES]
    ages = [r.last_step_age_s for r in running]
    if not running or None in ages:
        return None
    for_s = min(ages)  # type: ignore[type-var]
    stall_after = max(limit(r, stall.STALL) for r in running)
    if for_s < stall_after:
        return None
    level = "hung" if for_s >= max(limit(r, stall.HANG) for r in running) else "stalled"
    return classify(ranks, level, for_s, ended=False)


def crash_of(ranks: Sequence[JobSnapshot]) -> Hang | None:
    """What an ended job's collectives say of its end: None unless one of them raised."""
    if not any(_raised(r) is not None for r in ranks):
        return None
    ages = [r.last_step_age_s for r in ranks if r.last_step_age_s is not None]
    return classify(ranks, "crashed", min(ages, default=0.0), ended=True)


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


def classify(ranks: Sequence[JobSnapshot], level: str, for_s: float, ended: bool) -> Hang:
    """The kind of hang ``ranks`` are in, with every rank's place and the folded stacks."""
    final = {r.rank: (_raised(r) if ended else current(r)) for r in ranks}
    gone = [r for r in ranks if (final[r.rank] is None if ended else not _running(r))]
    # a stopped rank's open entry says where it was when stopped, not what the others wait in
    inside = {
        r.rank: c
        for r in ranks
        if (c := final[r.rank]) is not None and r not in gone and (ended or not stopped(r.proc))
    }
    ahead = _ahead(inside)
    waiting = {r: c for r, c in inside.items() if r not in ahead}
    keys = Counter(key_of(c) for c in waiting.values())
    main = _main(keys, waiting)
    members = [r for r in ranks if r not in gone and _member(r, main, len(ranks))]
    kind = _kind(gone, inside, keys, members, main)
    places = tuple(_place(r, final[r.rank], main, kind, r in gone, ended, r.rank in ahead)
                   for r in ranks)  # fmt: skip
    level = level if ended else _working(level, kind, places)
    if not ended and kind != "dead_rank" and any(stopped(r.proc) for r in ranks):
        kind = "stopped"  # the kernel's word first: whatever the collectives say, it waits
    return _hang(level, kind, for_s, ranks, places, main, waiting, keys)


def _ahead(inside: dict[int, Collective]) -> set[int]:
    """The ranks one collective past the lowest their group is in: they left it, so every
    rank entered it; not a desync (gloo's ring lets a rank finish before a peer that stopped
    in the middle of the collective has)."""
    low: dict[str, int] = {}
    for c in inside.values():
        low[c.group] = min(low.get(c.group, c.seq), c.seq)
    return {r for r, c in inside.items() if c.seq == low[c.group] + 1}


def _running(rank: JobSnapshot) -> bool:
    """Its segment says it runs, and the kernel does not say its training thread is gone."""
    return rank.state in LIVE_STATES and not dead(rank.proc)


def _working(level: str, kind: str, places: Sequence[RankHang]) -> str:
    """``busy`` when every rank the others wait for uses its CPU (or its worker's): a rank
    computing in Python for minutes is slow, not stuck."""
    if kind in ("no_collective", "unknown"):
        culprits = [p for p in places if p.state not in ("gone", "failed")]
    elif kind in ("not_entered", "desync"):
        culprits = [p for p in places if p.state in ("outside", "elsewhere")]
    else:
        return level
    works = [busy(p.proc) or (p.worker is not None and busy(p.worker.proc)) for p in culprits]
    return "busy" if works and all(works) else level


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
           gone: bool, ended: bool, ahead: bool) -> RankHang:  # fmt: skip
    """One rank's state and the words for it (what the kernel says of it appended); ``ahead``:
    it left the collective before ``c`` in its group (``_ahead``)."""
    stack = rank.stack
    frames, source = (stack.frames, stack.source) if stack is not None else ((), "")
    fell = _raised(rank) if gone else None
    if fell is not None:
        state, text = "failed", f"failed in {named(fell)}, then {rank.state}"
    elif gone:
        state, text = "gone", gone_text(rank)
    elif c is not None and main is not None and key_of(c) == key_of(main):
        state, text = "inside", f"{_in(c, ended)} {named(c)}{_for(c, ended)}"
    elif c is not None and ahead:
        state, text = "ahead", f"left #{c.seq - 1}, {_in(c, ended)} {named(c)}{_for(c, ended)}"
    elif c is not None:
        state, text = "elsewhere", f"{_in(c, ended)} {named(c)} ({c.group}){_for(c, ended)}"
    elif kind == "unknown":  # no ledger: the phase it is in
        state, text = "outside", phase_place(rank)
    else:
        state, text = "outside", _outside(_last_in(rank, main), kind)
    note = "" if gone or ended else proc_note(rank.proc, rank.pid)
    pin = pin_held(rank) if state == "outside" and not ended else ()
    worker = stalled_worker(rank) if state == "outside" and not ended and not pin else None
    return RankHang(rank.rank, rank.pid, state, f"{text}, {note}" if note else text,
                    c or _last_in(rank, main), frames, source, rank.proc, worker,
                    pin)  # fmt: skip


def pin_held(rank: JobSnapshot) -> tuple[Frame, ...]:
    """The pin_memory thread's stack when the rank waits for a batch on it (torch's
    ``_try_get_data`` in a ``queue.Queue``: the pin thread's output) and it waits on no worker
    (in a multiprocessing queue's ``get``): the thread itself holds the batch (pinning)."""
    stack = rank.stack
    if stack is None or not stack.pin_memory:
        return ()
    frames = stack.frames
    start = next((i for i, f in enumerate(frames) if f.function == "_try_get_data"), None)
    if start is None or not any(f.file.endswith(THREAD_QUEUE) for f in frames[start:]):
        return ()
    if any(f.function == "get" and f.file.endswith(PROCESS_QUEUE) for f in stack.pin_memory):
        return ()  # it waits for a worker, as its rank does: the worker is named
    return stack.pin_memory


def stalled_worker(rank: JobSnapshot) -> WorkerSnapshot | None:
    """The DataLoader worker a rank that waits for a batch waits on (the collector read its
    workers only then), as ``collectors/loader_workers.py`` picks it."""
    read = {w.pid: w.proc for w in rank.workers if w.proc is not None}
    pid = waited_on(read) if read else None
    return next((w for w in rank.workers if w.pid == pid), None)


def _outside(last: Collective | None, kind: str) -> str:
    """ "not entered (last #1041)": the collective the others are in, and where it got to."""
    if kind != "not_entered":
        return "in no collective"
    return f"not entered (last #{last.seq})" if last is not None else "not entered"


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


def _hang(level: str, kind: str, for_s: float, ranks: Sequence[JobSnapshot],
          places: tuple[RankHang, ...], main: Collective | None, inside: dict,
          keys: Counter) -> Hang:  # fmt: skip
    """Put the case together: the collective most ranks are in, who is not, the words."""
    in_main: tuple[int, ...] = ()
    waited = None
    if main is not None:
        in_main = tuple(sorted(r for r, c in inside.items() if key_of(c) == key_of(main)))
        waited = max(c.age_s for r, c in inside.items() if r in in_main)
    case = Case(level, kind, for_s, ranks, places, main, in_main, inside, waited)
    hang = Hang(
        level=level,
        kind=kind,
        for_s=for_s,
        summary=summary(case),
        group=main.group if main else None,
        seq=main.seq if main else None,
        op=main.op if main else None,
        shapes=tuple(sorted({k[3] for k in keys if main and k[:2] == key_of(main)[:2]})),
        inside=in_main,
        missing=tuple(p.rank for p in places if p.rank not in in_main and p.state != "ahead"),
        waited_s=waited,
        timeout_s=main.timeout_s if main else None,
        ranks=places,
        folds=case.folds,
        evidence=evidence(case),
    )
    return replace(hang, line=hang_line(hang))
