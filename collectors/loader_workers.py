"""A rank that waits for a batch: which DataLoader worker it waits on, its state, file, frame.

A rank stalled in its DataLoader's ``__next__`` is waiting on a worker process, and the frame
that matters is in that worker: its Python stack, and what the kernel says of it (``D`` in a
``read`` of a file on a dead mount, a frozen cgroup...).  For such a rank, each tick:

* every worker (a child of the rank) is read in ``/proc`` (``collectors/proc_state.py``);
* the one it most likely waits on is picked: blocked (``D``) first, then working, then one in
  a call that is not the idle wait for an index (a worker with nothing to do sits in ``poll`` on
  its index queue, woken every 5 s), the oldest first (a DataLoader starts worker 0 first);
* that worker is asked for its stack the way a rank's faulthandler is: a worker forked from the
  rank inherited the rank's faulthandler registration (its ``SigCgt`` says so) and its open
  ``.fault`` file, so the dump lands in the rank's file, told apart by torch's worker loop in it
  (``collectors/fault_dump.py``).  Only a process that handles the signal is sent it, one worker
  at a time, and never to the thread we want the stack of: the signal goes to another of its
  threads (the queue feeder, say), so the worker's own system call is not interrupted (a C
  reader that does not retry on EINTR would fail); a worker with no other thread is not asked.

Process-state reads only for a stalled rank that waits for data; never raises.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from traintop import ring_paths
from traintop.collectors.fault_dump import WORKER_LOOP, handles, own, worker_dumps
from traintop.collectors.proc_state import ProcReader, blocked, busy
from traintop.collectors.rates import measured
from traintop.collectors.ring_reader import HotBlock
from traintop.collectors.snapshot import Frame, ProcState, RankStack, WorkerSnapshot
from traintop.collectors.stacks import send_to_thread

GIVE_UP_S = 5.0  # no dump by then (the worker cannot take the signal): ask again later
REFRESH_S = 15.0  # a worker's stack this old is asked for again
MAX_DUMP_BYTES = 1 << 20
IDLE_CALLS = frozenset({"poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait",
                        "epoll_pwait2"})  # fmt: skip


class _Asked(NamedTuple):
    pid: int
    sent_s: float
    offset: int


class WorkerWatch:
    """The workers of one rank: their state, and the stack of the one it waits on."""

    def __init__(self, segment: Path, reader: ProcReader) -> None:
        self._fault = ring_paths.side_path(segment, ring_paths.FAULT_SUFFIX)
        self._reader = reader
        self._asked: _Asked | None = None
        self._stacks: dict[int, tuple[tuple[Frame, ...], float]] = {}  # pid: (frames, when)
        self._tried: dict[int, float] = {}  # pid: when last signalled

    @property
    def asking(self) -> bool:
        """A worker was signalled and its dump has not come yet."""
        return self._asked is not None

    def tend(self, now: float, hot: HotBlock | None, pids: Sequence[int]) -> dict[int, tuple]:
        """Read each worker; ask the one waited on for its stack; (state, stack) per pid."""
        states = {pid: self._reader.read(pid) for pid in pids}
        self._read_dump(now)
        waited = waited_on(states)
        if waited is not None and self._asked is None and hot is not None:
            self._ask(waited, now, hot.stack_signal)
        return {pid: (state, self._stack(pid, now)) for pid, state in states.items()}

    def _stack(self, pid: int, now: float) -> RankStack | None:
        found = self._stacks.get(pid)
        if found is None:
            return None
        return RankStack(found[0], measured(max(0.0, now - found[1])), "signal")

    def _ask(self, pid: int, now: float, number: int) -> None:
        """Signal one thread of ``pid`` other than its main one, if it handles the signal and
        was not asked recently."""
        taken = self._stacks.get(pid)
        fresh = taken is not None and now - taken[1] < REFRESH_S
        if fresh or now - self._tried.get(pid, -REFRESH_S) < REFRESH_S:
            return
        tid = _other_thread(pid)
        if not number or tid is None or not handles(pid, number):
            return
        try:
            offset = os.stat(self._fault, follow_symlinks=False).st_size
            send_to_thread(pid, tid, number)
        except OSError:
            return
        self._tried[pid] = now
        self._asked = _Asked(pid, now, offset)

    def _read_dump(self, now: float) -> None:
        """The asked worker's dump, once written: the newest worker dump after its offset."""
        asked = self._asked
        if asked is None:
            return
        try:
            with open(self._fault, "rb") as f:
                f.seek(asked.offset)
                text = f.read(MAX_DUMP_BYTES).decode(errors="replace")
        except OSError:
            text = ""
        found = worker_dumps(text)
        if found:
            block = found[-1].runs(WORKER_LOOP)
            frames = tuple(f for f in block.frames if not own(f.file)) if block else ()
            self._stacks[asked.pid] = (frames, now)
            self._asked = None
        elif now - asked.sent_s >= GIVE_UP_S:
            self._asked = None


def waited_on(states: dict[int, ProcState]) -> int | None:
    """The worker a rank most likely waits on: blocked, then working, then in a call other
    than the idle wait for its next index; the oldest of equals (``states`` is oldest first).
    None when every worker idles (the rank waits on something else: its pin_memory thread)."""
    ranked = [(_rank(state), index, pid) for index, (pid, state) in enumerate(states.items())]
    ranked = [item for item in ranked if item[0] is not None]
    return min(ranked)[2] if ranked else None


def _rank(state: ProcState) -> int | None:
    if blocked(state):
        return 0
    if busy(state) or state.state == "R":
        return 1
    if state.state in ("S", "T", "t") and state.syscall not in IDLE_CALLS:
        return 2
    return None


def _other_thread(pid: int) -> int | None:
    """A thread of ``pid`` that can take a signal at once and is not its main thread: a
    thread in ``D`` would take it only when the kernel lets go."""
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit())
    except OSError:
        return None
    for tid in tids:
        if tid == pid:
            continue
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state in (b"S", b"R"):
            return tid
    return None


def with_state(
    workers: tuple[WorkerSnapshot, ...], found: dict[int, tuple[ProcState, RankStack | None]]
) -> tuple[WorkerSnapshot, ...]:
    """The tick's workers with their state and stack (those read); workers the process scan
    did not list (a one-shot command has none) are added from ``found``."""
    known = {w.pid for w in workers}
    out = [_filled(w, found.get(w.pid)) for w in workers]
    out += [WorkerSnapshot(pid, None, None, None, *found[pid]) for pid in found if pid not in known]
    return tuple(out)


def _filled(worker: WorkerSnapshot, found: tuple | None) -> WorkerSnapshot:
    if found is None:
        return worker
    proc, stack = found
    return WorkerSnapshot(worker.pid, worker.cpu_pct, worker.rss_bytes, worker.read_bytes_per_s,
                          proc, stack)  # fmt: skip
