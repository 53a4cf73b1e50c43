"""What a rank that stopped stepping is doing: the kernel's view first, its stack, its workers.

From half its stall limit on (``collectors/stall.py``), each tick, for that rank only:

1. its training thread in ``/proc`` (``collectors/proc_state.py``): stopped, blocked in the
   kernel, gone, or working;
2. its stack (``collectors/stacks.py``): one taken since the rank last moved, whoever had it
   taken (another `traintop jobs`, the monitor: an answer or a dump under 15 s old) is used as
   it is; else it is asked for, unless it is stopped or gone (it could not answer);
3. while it waits for a batch (its live phase is ``data``, or its stack is in the DataLoader's
   ``__next__``), the workers it may wait on (``collectors/loader_workers.py``).

A rank that steps again is forgotten: nothing of it is read until it stalls again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from traintop.collectors.loader_workers import WorkerWatch
from traintop.collectors.proc_state import ProcReader, dead, stopped
from traintop.collectors.ring_header import SegmentHeader
from traintop.collectors.ring_reader import HotBlock
from traintop.collectors.snapshot import ProcState, RankStack
from traintop.collectors.stacks import REPLY_WAIT_S, StackClient

STACK_REFRESH_S = 15.0  # a stalled rank's stack is asked for again after this long
DATA_PHASE = "data"
NEXT_BATCH = ("__next__", "dataloader.py")


class StallWatch:
    """One rank's process state, stack and loader workers while it does not step."""

    def __init__(
        self, segment: Path, header: SegmentHeader, reader: ProcReader,
        reply_wait_s: float = REPLY_WAIT_S,
    ) -> None:  # fmt: skip
        self.stacks = StackClient(segment, header, reply_wait_s)
        self._workers = WorkerWatch(segment, reader)
        self._reader = reader
        self._pid = header.pid
        self.proc: ProcState | None = None
        self.workers: dict[int, tuple[ProcState, RankStack | None]] = {}
        self._key: tuple | None = None  # where the rank was when its stack was had

    def quiet(self) -> None:
        """The rank steps: its old state and stack say nothing any more."""
        self.stacks.forget()
        self.proc, self.workers, self._key = None, {}, None

    def tend(self, now: float, hot: HotBlock | None, moved_ns: int, phase: str | None,
             worker_pids: Callable[[int], Sequence[int]],
             refresh_s: float = STACK_REFRESH_S) -> None:  # fmt: skip
        """One tick of a stalled rank (or one still in its first step); ``moved_ns``: when it
        last moved (its last step, phase or collective), ``phase`` the phase it is in; its
        stack is asked for again after ``refresh_s``, or as soon as it moved."""
        self.proc = self._reader.read(self._pid, hot.train_tid if hot is not None else 0)
        key = (hot.ledger_head, hot.live_phase, hot.live_start_ns) if hot else None
        taken = self.stacks.taken
        stale = taken is None or now - taken.taken_s >= refresh_s
        if (stale or key != self._key) and self._have_stack(now, hot, moved_ns):
            self._key = key
        self.stacks.poll(now, hot)
        waits = phase == DATA_PHASE or _in_next(self.stacks.taken)
        pids = worker_pids(self._pid) if waits and not dead(self.proc) else ()
        self.workers = self._workers.tend(now, hot, pids) if pids else {}

    def pending(self) -> bool:
        """Something asked of this stalled rank has not come back: its stack, its worker's,
        or a second reading of its CPU time (the first one says nothing of a rate)."""
        if self.stacks.waiting or self._workers.asking:
            return True
        proc = self.proc
        return proc is not None and proc.cpu_pct is None and not (stopped(proc) or dead(proc))

    def _have_stack(self, now: float, hot: HotBlock | None, moved_ns: int) -> bool:
        """Use a stack someone already had taken, else ask; a stopped or dead rank is asked
        nothing (it could not answer, and a signal would wait for it to resume)."""
        if self.stacks.reuse(now, hot, moved_ns):
            return True
        if stopped(self.proc) or dead(self.proc):
            return False
        return self.stacks.ask(now)


def _in_next(taken) -> bool:
    """The stack waits in a DataLoader's ``__next__``."""
    if taken is None:
        return False
    name, file = NEXT_BATCH
    return any(f.function == name and f.file.endswith(file) for f in taken.frames)


def moved_ns(last_step_ns: int | None, hot: HotBlock | None, entered_ns: Sequence[int]) -> int:
    """When a rank last moved (CLOCK_MONOTONIC ns): its last step's end, the phase it entered
    since, the newest collective it entered."""
    signs = [last_step_ns or 0, *entered_ns]
    if hot is not None:
        signs.append(hot.live_start_ns)
    return max(signs)
