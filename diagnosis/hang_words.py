"""The words of a hang (diagnosis/hang.py): its one-line summary and its evidence.

Split from the classification for size: the summary names the ranks and where they are, one
sentence per kind; the evidence says how long nothing stepped, the ranks folded by where they
are, where the ledger places the ranks with no stack, and when PyTorch's timeout ends the wait.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from traintop.collectors import stall
from traintop.collectors.proc_state import blocked, busy, dead, stopped
from traintop.collectors.snapshot import (
    Collective,
    Frame,
    JobSnapshot,
    ProcState,
    WorkerSnapshot,
)
from traintop.diagnosis.model import LIVE_STATES, RankHang, StackFold
from traintop.diagnosis.run_life import short_ending
from traintop.diagnosis.stack_text import fold, fold_line, where
from traintop.diagnosis.text import duration, rank_list, waits_in

Key = tuple[str, int, str, str]  # group, seq, op, shape
CROWDED_GAP_PCT = 15.0  # runnable this much more than it ran: it waited for a CPU
BACKWARD_NOTE = (
    "the wait at the end of backward is for DDP's (or FSDP's) gradient all-reduces, which are "
    "issued from C++: no Python hook sees each bucket, so the ledger times the wait, not them"
)

SAID = frozenset({"raised", "exited", "signal"})  # endings a rank's probe wrote down


def key_of(c: Collective) -> Key:
    """What must agree between ranks in one collective."""
    return (c.group, c.seq, c.op, c.shape)


def limit(rank: JobSnapshot, default: stall.Threshold) -> float:
    """The rank's own limit (set by the collector), else the default for its median step."""
    own = rank.stall_after_s if default is stall.STALL else rank.hang_after_s
    return own if own is not None else default.after_s(rank.step_time_p50_s)


@dataclass(frozen=True)
class Case:
    """What the words are made of: the classification's result."""

    level: str
    kind: str
    for_s: float
    ranks: Sequence[JobSnapshot]
    places: tuple[RankHang, ...]
    main: Collective | None  # the collective most ranks are in
    in_main: tuple[int, ...]
    inside: dict[int, Collective]  # every rank in a collective, and which
    waited: float | None
    folds: tuple[StackFold, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "folds", fold([(p.rank, p.frames) for p in self.places]))


def summary(case: Case) -> str:
    """One sentence: the ranks that matter, the collective, where the odd ranks are."""
    return SUMMARIES[case.kind](case)


def evidence(case: Case) -> tuple[str, ...]:
    lines = [_silence(case), *(fold_line(f) for f in case.folds), *_site_lines(case.places)]
    if case.kind == "unknown":
        lines += [_phase(r) for r in case.ranks if r.state in LIVE_STATES]
    main = case.main
    if main is not None and main.group == "backward":
        lines.append(BACKWARD_NOTE)
    if case.level != "crashed" and main is not None and main.timeout_s and case.waited:
        left = max(0.0, main.timeout_s - case.waited)
        lines.append(f"the group's timeout ({duration(main.timeout_s)}) ends the wait in "
                     f"{duration(left)}")  # fmt: skip
    return tuple(lines)


def _unknown(case: Case) -> str:
    phases = "; ".join(_phase(r) for r in case.ranks if r.state in LIVE_STATES)
    return f"no collective ledger (an older traintop wrote these rings); {phases}"


def _no_collective(case: Case) -> str:
    return f"no rank is in a collective (a data or compute hang); {_at(case.places[0])}"


def _stopped(case: Case) -> str:
    """ "rank 1 is stopped: `kill -CONT 4242` resumes it; ranks 0, 2-3 wait in all_reduce #31
    (0:default_pg) for 12s"."""
    held = [p for p in case.places if stopped(p.proc)]
    parts = [f"rank {p.rank} is {proc_note(p.proc, p.pid)}" for p in held[:3]]
    main = case.main
    waiting = [r for r in case.in_main if r not in {p.rank for p in held}]
    if main is not None and waiting:
        verb = "waits" if len(waiting) == 1 else "wait"
        parts.append(f"{_ranks_word(waiting)} {verb} in {named(main)} ({main.group}) for "
                     f"{duration(main.age_s)}")  # fmt: skip
    return "; ".join(parts)


def _desync(case: Case) -> str:
    inside = case.inside
    parts = [f"{_ranks_word(sorted(r for r, c in inside.items() if key_of(c) == k))} in "
             f"{k[2]} #{k[1]} ({k[0]}{', ' + k[3] if k[3] else ''})"
             for k in sorted({key_of(c) for c in inside.values()})]  # fmt: skip
    parts += [_at(p) for p in case.places if p.state == "outside"][:3]
    return (
        f"the ranks are in collectives that differ: {'; '.join(parts)} (the code took "
        "different paths)"
    )


def _not_finished(case: Case) -> str:
    main = case.main
    assert main is not None  # the kind: every rank is in the main collective
    shape = f", {main.shape}" if main.shape else ""
    left = [p.rank for p in case.places if p.state == "ahead"]
    held = (
        f"{_ranks_word(left)} left it, {_ranks_word(case.in_main)} did not" if left else "none left"
    )
    return (f"every rank entered {named(main)} ({main.group}{shape}) and {held}: "
            "the link or a peer's device")  # fmt: skip


def _not_entered(case: Case) -> str:
    main = case.main
    assert main is not None  # the kind: some ranks wait in the main collective
    shape = f", {main.shape}" if main.shape else ""
    late = [p for p in case.places if p.state == "outside"]
    odd = "; ".join(_at(p) for p in late[:3])
    return (f"{_ranks_word([p.rank for p in late])} never reached {named(main)} "
            f"({main.group}{shape}) that {_ranks_word(case.in_main)} "
            f"{waits_in(len(case.in_main), False)} for "
            f"{duration(main.age_s)}; {odd}")  # fmt: skip


def _dead(case: Case) -> str:
    """ "rank 3 gone (finished); ranks 0, 2 failed in all_reduce #32 and ended; rank 1 waits
    in it": who went first, who fell with the collective, who still waits."""
    first = [p for p in case.places if p.state == "gone"]
    fell = [p.rank for p in case.places if p.state == "failed"]
    texts = ", ".join(sorted({p.text for p in first}))
    parts = [f"{_ranks_word([p.rank for p in first])} {texts}"] if first else []
    main = case.main
    if main is None:
        return "; ".join([*parts, "the others wait"])
    what = f"{named(main)} ({main.group})"
    if fell:
        parts.append(f"{_ranks_word(fell)} failed in {what} and ended")
    if case.in_main:
        verb = "failed in" if main.raised else waits_in(len(case.in_main), case.level == "crashed")
        parts.append(f"{_ranks_word(case.in_main)} {verb} {'it' if fell else what}")
    return "; ".join(parts)


SUMMARIES = {
    "unknown": _unknown,
    "no_collective": _no_collective,
    "dead_rank": _dead,
    "desync": _desync,
    "not_finished": _not_finished,
    "not_entered": _not_entered,
    "stopped": _stopped,
}


def named(c: Collective) -> str:
    """ "all_reduce #1042"."""
    return f"{c.op} #{c.seq}"


def _site_lines(places: tuple[RankHang, ...]) -> list[str]:
    """Ranks with no stack: where their ledger says they called their collective."""
    lines: dict[str, list[int]] = {}
    for p in places:
        if not p.frames and p.collective is not None and p.collective.site:
            lines.setdefault(_site(p.collective), []).append(p.rank)
    return [f"{_ranks_word(rs)} (its ledger): {text}" for text, rs in lines.items()]


def _site(c: Collective) -> str:
    """ "all_reduce #31 called at hangs.py log_metrics:96"."""
    return f"{named(c)} called at {c.site.replace(':', ' ', 1)}"


def _silence(case: Case) -> str:
    """ "no rank finished a step for 43s (stalled after 10s, hung after 1m00s)"."""
    running = [r for r in case.ranks if r.state in LIVE_STATES]
    if case.level == "crashed" or not running:
        return f"the job ended {duration(case.for_s)} after its last step"
    stall_after = max(limit(r, stall.STALL) for r in running)
    hang_after = max(limit(r, stall.HANG) for r in running)
    return (f"no rank finished a step for {duration(case.for_s)} (stalled after "
            f"{duration(stall_after)}, hung after {duration(hang_after)})")  # fmt: skip


def _phase(rank: JobSnapshot) -> str:
    """ "rank 0 in backward for 42s" from the live word, for ranks with no ledger."""
    return f"rank {rank.rank} {phase_place(rank)}"


def phase_place(rank: JobSnapshot) -> str:
    """ "in backward for 42s"; "in an unknown phase"."""
    if rank.live_phase is None or rank.live_phase_s is None:
        return "in an unknown phase"
    return f"in {rank.live_phase} for {duration(rank.live_phase_s)}"


def _at(place: RankHang) -> str:
    """ "rank 2 is in train.py:88 in log_metrics: time.sleep(600)", else what its ledger
    says of it; what the kernel says of it, and the worker it waits on for a batch."""
    note = proc_note(place.proc, place.pid) if place.state != "gone" else ""
    if place.frames:
        text = f"rank {place.rank} is in {where(place.frames)}" + (f" ({note})" if note else "")
    else:
        c = place.collective
        ledger = f"; its ledger: {_site(c)}" if c is not None and c.site else ""
        text = f"rank {place.rank} is {note}{ledger}" if note else \
            f"rank {place.rank}: no stack yet{ledger}"  # fmt: skip
    worker = place.worker
    if place.pin_memory:
        return f"{text}; {pin_text(place.pin_memory)}"
    return f"{text}; {worker_text(worker)}" if worker is not None else text


def pin_text(frames: Sequence[Frame]) -> str:
    """ "it waits for its pin_memory thread, at pin_memory.py:64 in pin_memory"."""
    return f"it waits for its pin_memory thread, at {where(frames)}"


def proc_note(proc: ProcState | None, pid: int) -> str:
    """What the kernel says of a rank that matters to its user: stopped (and how to resume it),
    held by a debugger, blocked in the kernel (the call and its file), working on its CPU; ""
    for a rank that sleeps, as a waiting rank does."""
    if proc is None:
        return ""
    if proc.state == "T":
        return f"stopped (SIGSTOP or job control): `kill -CONT {pid}` resumes it"
    if proc.state == "t":
        return "held by a debugger (traced): it runs again when the debugger lets it go"
    if blocked(proc):
        return f"blocked in the kernel (state D){_call(proc)}"
    if busy(proc):
        return _working(proc)
    return ""


def _working(proc: ProcState) -> str:
    """ "working: on CPU 98 %"; on a crowded box, what it wanted beside what it got."""
    cpu, wanted = proc.cpu_pct or 0.0, proc.runnable_pct
    if wanted is None or wanted - cpu < CROWDED_GAP_PCT:
        return f"working: on CPU {cpu:.0f} %"
    return f"working: on CPU {cpu:.0f} %, runnable {wanted:.0f} % (the CPUs are crowded)"


def _call(proc: ProcState) -> str:
    """ " in read on /data/shard-3.tar, wchan nfs_wait_bit_killable"."""
    text = f" in {proc.syscall}" if proc.syscall else ""
    text += f" on {proc.file}" if proc.syscall and proc.file else ""
    return text + (f", wchan {proc.wchan}" if proc.wchan else "")


def worker_text(worker: WorkerSnapshot) -> str:
    """ "it waits for its DataLoader worker 8812 (blocked in the kernel (D) in read on
    /mnt/x.bin), at data.py:70 in __getitem__: f.read()"."""
    note = proc_note(worker.proc, worker.pid) or _sleeping(worker.proc)
    text = f"it waits for its DataLoader worker {worker.pid}" + (f" ({note})" if note else "")
    stack = worker.stack
    if stack is not None and stack.frames:
        return f"{text}, at {where(stack.frames)}"
    return text


def _sleeping(proc: ProcState | None) -> str:
    """A worker asleep in a call (not the rank's idle wait): which call, on which file."""
    if proc is None or not proc.syscall:
        return ""
    return f"asleep in {proc.syscall}" + (f" on {proc.file}" if proc.file else "")


def gone_text(rank: JobSnapshot) -> str:
    """ "gone (crashed)", or how it ended where its probe said ("raised ValueError", "stopped by
    SIGTERM"); a rank whose training thread the kernel no longer lists, or that is a zombie,
    while its segment still reads alive: said as the kernel says it."""
    if rank.state not in LIVE_STATES and rank.ending is not None and rank.ending.kind in SAID:
        return short_ending(rank.ending)
    if not dead(rank.proc) or rank.state not in LIVE_STATES:
        return f"gone ({rank.state})"
    if rank.proc is not None and rank.proc.state == "Z":
        return "gone (a zombie: it exited, its parent has not reaped it)"
    return "gone (its training thread ended)"


def _ranks_word(ranks: Sequence[int]) -> str:
    ranks = list(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_list(ranks)}"
