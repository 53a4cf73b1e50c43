"""A stopped job in one line of at most 76 cells: who, where, for how long, shortest first.

"HANG 19s · rank 2 in read_batch (train.py:37) · ranks 0-1 wait in backward": the head (how
long nothing stepped; ``BUSY`` when the ranks the others wait for are working), then the ranks
that hold the job (where each is: its own innermost frame, or what the kernel says: stopped,
blocked in a call, the worker it waits on), then the ranks that wait.  The banner, `traintop
jobs`, `traintop diagnose`, the JSON and the fleet all show this one line (``Hang.line``); the
details stay in the case's sentence and its evidence.  When the whole does not fit, frames lose
their file, then the waiting ranks go, then the end is cut.  Pure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from traintop.collectors.proc_state import blocked, busy, stopped
from traintop.collectors.snapshot import Collective, Frame, ProcState, WorkerSnapshot
from traintop.diagnosis.model import Hang, RankHang
from traintop.diagnosis.stack_text import innermost_user
from traintop.diagnosis.text import duration, rank_list, waits_in

WIDTH = 76  # an 80-column terminal less the banner's edge and mark ("▌ ◆ ")
SEP = " · "
HEADS = {"busy": "BUSY", "crashed": "CRASHED"}
MAX_GROUPS = 2  # ranks told apart by where they are; more read "…"
GONE_WIDTH = 24  # "gone (crashed)"; a longer reason reads "gone" (the case says it whole)
FULL, SHORT, TERSE, BARE = 3, 2, 1, 0  # how much of a place is said
# (the holding ranks' detail, the waiting ones'), tried in turn until the line fits: the
# collective's number goes first, then the waiting ranks' numbers, then the frames' files,
# then the waiting ranks
FITS = ((FULL, FULL), (FULL, SHORT), (FULL, TERSE), (SHORT, SHORT), (SHORT, TERSE),
        (FULL, BARE), (SHORT, BARE), (BARE, BARE))  # fmt: skip

Host = Callable[[int], str | None]
ANONYMOUS = frozenset({"<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<lambda>"})


def hang_line(hang: Hang, host: Host | None = None, width: int = WIDTH) -> str:
    """The line for ``hang`` fitted to ``width`` cells; ``host`` names a rank's node (the
    fleet: "rank 5 on node-b ...")."""
    head = HEADS.get(hang.level, "HANG")
    head = head if hang.level == "crashed" else f"{head} {duration(hang.for_s)}"
    text = head
    for own, others in FITS:
        parts = [head, _culprits(hang, host, own), _waiting(hang, others)]
        text = SEP.join(p for p in parts if p)
        if len(text) <= width:
            return text
    return text[: width - 1] + "…"


def _culprits(hang: Hang, host: Host | None, detail: int) -> str:
    """The ranks that hold the job, grouped by what they do."""
    if hang.kind == "not_finished":
        what = f"{hang.op} #{hang.seq}" if detail else hang.op
        return f"every rank in {what}, none left" + (": link or peer device" if detail else "")
    groups: dict[str, list[int]] = {}
    for place in _holding(hang):
        groups.setdefault(_doing(place, detail, _shaped(hang)), []).append(place.rank)
    parts = [_who(ranks, host) + (f" {doing}" if doing else "") for doing, ranks in groups.items()]
    more = "…" if len(parts) > MAX_GROUPS else ""
    return SEP.join(parts[:MAX_GROUPS]) + more


def _holding(hang: Hang) -> list[RankHang]:
    """The ranks the others wait for, by kind: the gone, the stopped, the late or elsewhere."""
    places = hang.ranks
    if hang.kind == "dead_rank":  # who went first, then who fell with the collective
        return [p for p in places if p.state == "gone"] + [p for p in places if p.state == "failed"]
    if hang.kind == "stopped":
        return [p for p in places if stopped(p.proc)]
    return [p for p in places if p.state in ("outside", "elsewhere")]


def _who(ranks: Sequence[int], host: Host | None) -> str:
    word = "rank" if len(ranks) == 1 else "ranks"
    nodes = {host(r) for r in ranks} if host is not None else set()
    on = f" on {nodes.pop()}" if len(nodes) == 1 and None not in nodes else ""
    return f"{word} {_ranks(ranks)}{on}"


def _doing(place: RankHang, detail: int, shaped: bool = False) -> str:
    """Where one rank is and what holds it, as few words as ``detail`` allows (``shaped``:
    the ranks' collectives differ by their shapes alone, which are said)."""
    proc = place.proc
    if place.state in ("gone", "failed") and detail == BARE:
        return "gone"
    if place.state == "failed":  # it fell with the collective after the one who went first
        return "failed"
    if place.state == "gone":
        return place.text if detail == FULL and len(place.text) <= GONE_WIDTH else "gone"
    if stopped(proc):
        return f"stopped (kill -CONT {place.pid})" if proc.state == "T" else "held by a debugger"
    if place.state == "elsewhere" and place.collective is not None:
        return f"in {_named(place.collective, detail, shaped)}"
    if place.pin_memory:
        where = _where(place.pin_memory, detail)
        return "waits on pin thread" + (f" {where}" if where else "")
    if place.worker is not None:
        return _waits_for(place.worker, detail)
    text = _where(place.frames, detail) or _ledger(place, detail)
    return _with_kernel(text, proc, detail)


def _waits_for(worker: WorkerSnapshot, detail: int) -> str:
    """ "waits on worker 8812 in __getitem__ (data.py:70), D: read x.bin"."""
    frames = worker.stack.frames if worker.stack is not None else ()
    where = _where(frames, detail)
    text = f"waits on worker {worker.pid}" + (f" {where}" if where else "")
    proc = worker.proc
    if proc is not None and proc.state == "S" and proc.syscall and detail:  # asleep in a call
        return f"{text}: {proc.syscall} {_base(proc.file)}".rstrip()
    return _with_kernel(text, proc, detail)


def _from_user(frames: Sequence[Frame]) -> Sequence[Frame]:
    """A worker's stack from its dataset down (its outer frames are the rank's, at the fork)."""
    loop = next((i for i, f in enumerate(frames) if f.function == "_worker_loop"), None)
    return frames if loop is None else frames[loop:]


def _with_kernel(text: str, proc: ProcState | None, detail: int) -> str:
    """ "in read_batch (train.py:37), D: read x.bin"; "on CPU in spin (train.py:9)"."""
    if blocked(proc):
        call = f"{proc.syscall} {_base(proc.file)}".strip() if proc.syscall else proc.wchan
        return f"{text}, D: {call}" if call and detail else f"{text} (D)"
    if busy(proc):
        return f"on CPU {text}" if text.startswith("in ") or not text else f"{text}, on CPU"
    return text


def _where(frames: Sequence[Frame], detail: int) -> str:
    """ "in read_batch (train.py:37)"; the function alone when short of room; "" without a
    stack."""
    if not frames or detail == BARE:
        return ""
    frame = _innermost(_from_user(frames))
    if detail == SHORT:
        return f"in {frame.function}"
    return f"in {where_short(frames)}"


def where_short(frames: Sequence[Frame]) -> str:
    """ "read_batch (train.py:37)": the innermost frame of the user's own code (of any code
    when there is none; of a DataLoader worker's, from its loop down); "" without a stack."""
    if not frames:
        return ""
    frame = _innermost(_from_user(frames))
    return f"{frame.function} ({_base(frame.file)}:{frame.line})"


def _innermost(frames: Sequence[Frame]) -> Frame:
    """The innermost frame of the user's code, out of any comprehension or generator
    expression (``spin``, not ``<genexpr>``: the function names the place)."""
    index = innermost_user(frames)
    index = len(frames) - 1 if index is None else index
    while index > 0 and frames[index].function in ANONYMOUS:
        index -= 1
    return frames[index]


def _ledger(place: RankHang, detail: int) -> str:
    """No stack: "not entered, last at log_metrics (hangs.py:96)" (its ledger's last call)."""
    if place.state != "outside":
        return ""
    if place.collective is None and place.text.startswith("in ") and "collective" not in place.text:
        # no ledger: the phase it is in
        return place.text.split(",")[0]
    late = "not entered" if "not entered" in place.text else "no stack yet"
    c = place.collective
    site = c.site.split(":") if c is not None and c.site else []
    if len(site) == 3 and detail == FULL:
        return f"{late}, last at {site[1]} ({site[0]}:{site[2]})"
    return late


def _waiting(hang: Hang, detail: int) -> str:
    """ "ranks 0-1,3 wait in all_reduce" (with its number when there is room), without the
    ranks that hold the job (a stopped rank may be inside the collective too)."""
    holding = {p.rank for p in _holding(hang)}
    ranks = [r for r in hang.inside if r not in holding]
    if not ranks or hang.op is None or hang.kind == "not_finished" or detail == BARE:
        return ""
    what = hang.op if hang.group != "backward" else "backward"
    if detail == FULL and hang.group != "backward":
        what += f" #{hang.seq}"
    main = next((p.collective for p in hang.ranks if p.state == "inside"), None)
    if _shaped(hang) and main is not None and main.shape:
        if detail == TERSE:  # the collective is the same: its other shape says it
            return f"others {main.shape}"
        what = _named(main, detail, True)
    ended = hang.level == "crashed"  # failed with the collective, or stopped while in it
    raised = ended and main is not None and main.raised
    count = len(ranks) if detail != TERSE else 2  # TERSE: "others", plural
    verb = "in" if hang.kind == "desync" else "failed in" if raised else waits_in(count, ended)
    if detail == TERSE:
        return f"others {verb} {what}"
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {_ranks(ranks)} {verb} {what}"


def _shaped(hang: Hang) -> bool:
    """A desync by shape: the same collective, reduced with tensors of other shapes."""
    ops = {p.collective.op for p in hang.ranks if p.collective is not None}
    return hang.kind == "desync" and len(hang.shapes) > 1 and len(ops) == 1


def _named(c: Collective, detail: int, shaped: bool) -> str:
    """ "all_reduce #31", with its shape where shapes are what differs ("all_reduce #31
    f32[2048]")."""
    text = f"{c.op} #{c.seq}" if detail == FULL or (detail and not shaped) else c.op
    return f"{text} {c.shape}" if shaped and c.shape else text


def _ranks(ranks: Sequence[int]) -> str:
    """ "0-1,3": ``rank_list`` without its spaces, a line is short of room."""
    return rank_list(list(ranks)).replace(", ", ",")


def _base(path: str | None) -> str:
    return os.path.basename(path) if path else ""
