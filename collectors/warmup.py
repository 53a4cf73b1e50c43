"""A rank before its first step: whether it works, from what the kernel says of it.

A segment made at start-up (traintop/run_start.py) exists long before the first step ends: a
``torch.compile`` warm-up, a graph capture or an index build can take minutes of busy CPU.  Such
a rank is *starting*, never stalled: no step was ever late.  It counts as stalled only when it is
blocked: its main thread off the CPU, its CPU time still, and no child of it working (inductor
compiles in worker processes while the main thread waits for them) for longer than the stall
limit, e.g. a rendezvous that never completes.  Read from ``/proc/PID/stat`` once a tick, and
only for ranks that have not stepped yet, on this host and in this pid namespace.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from traintop.collectors.snapshot import ProcState, WorkerSnapshot

BUSY_PCT = 20.0  # of a core: a process (or a child) using this much is working
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


class Warmup:
    """What a rank that has not stepped yet is doing, tick by tick."""

    def __init__(self, pid: int, visible: bool) -> None:
        self._pid = pid
        self._visible = visible  # its /proc is ours to read (same host and pid namespace)
        self._cpu: tuple[float, float] | None = None  # (monitor time, CPU seconds)
        self.proc: ProcState | None = None
        # The last tick it was found working (monotonic seconds); from the first look on, so
        # that a rank is called blocked only after this monitor saw it idle that long.
        self.working_at = float("inf")
        self.limit_s = float("inf")  # blocked this long, it is stalled (the collector's limit)

    def tick(self, now: float, children: Iterable[WorkerSnapshot] = ()) -> None:
        """Read the rank's main thread state and CPU time; it works while on the CPU or while
        a child of it does."""
        self.working_at = min(self.working_at, now)
        if not self._visible:
            self.working_at = now  # nothing to tell it blocked by: never stalled on a guess
            return
        reading = read_stat(self._pid)
        if reading is None:
            return
        state, cpu_s = reading
        pct = None
        if self._cpu is not None and now > self._cpu[0]:
            pct = max(0.0, 100.0 * (cpu_s - self._cpu[1]) / (now - self._cpu[0]))
        self._cpu = (now, cpu_s)
        self.proc = ProcState(state=state, cpu_s=cpu_s, cpu_pct=pct)
        busy_child = any((c.cpu_pct or 0.0) >= BUSY_PCT for c in children)
        if on_cpu(self.proc) or busy_child:
            self.working_at = now

    def blocked_s(self, now: float) -> float:
        """How long it has not worked (0 while it does)."""
        return max(0.0, now - self.working_at)

    def blocked(self, now: float) -> bool:
        """Blocked past the stall limit: stalled before its first step (never a rank whose
        ``/proc`` cannot be read)."""
        return self._visible and self.blocked_s(now) > self.limit_s


def on_cpu(proc: ProcState | None) -> bool:
    """Its main thread runs, or its threads together use a fifth of a core or more."""
    if proc is None:
        return False
    return proc.state == "R" or (proc.cpu_pct or 0.0) >= BUSY_PCT


def read_stat(pid: int) -> tuple[str, float] | None:
    """(the main thread's state letter, the process's CPU seconds) from ``/proc/PID/stat``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), (int(fields[11]) + int(fields[12])) * _TICK_S
    except (OSError, IndexError, ValueError):
        return None
