"""Every Python thread of the rank, sampled: its name, where it is, and whether it can run without
the interpreter (the stack helper's ``threads`` request, traintop/stack_helper.py).

The monitor sees a rank's threads in the kernel (``/proc/PID/task``: CPU time, state) but not
their Python names, nor whether a busy one holds the GIL.  The helper can tell both.  For each
sample it holds the GIL itself for ``WINDOW_S`` (a Python loop keeps it), then lets go of it for
as long while still keeping a CPU busy (hashing in C, which releases the GIL: asleep, it would
hand the others a CPU the first window took, and on a 2-core box a thread in C read as needing
the GIL), and reads each thread's CPU-time clock around both: a thread that needs the GIL to run
(pure Python, or C code that keeps it) runs only while the GIL is free; a thread in C code that
released it (a NumPy or torch kernel, a socket call, NCCL's or gloo's loops) runs in both alike,
as much as the CPUs let it.  The two sums are compared, not the first alone: on a crowded box a
thread that is not in the GIL's way may still wait for a CPU. The clock is the thread's own
(``pthread_getcpuclockid``): the kernel brings a running thread's time up to date when asked,
where ``schedstat`` and ``stat`` lag by up to a scheduler tick.

What is counted is in how many windows of each kind a thread ran at all (``RAN_NS``): on a
crowded box a thread that does not need the GIL may still wait for a CPU through a whole
millisecond, so the CPU time it got in a window says little; whether it ever ran while the GIL
was held, over twenty windows, says whether it can.  Stdlib only.  A sample holds the GIL about 1.1
ms, twenty a request (22 ms of the interpreter), and a monitor asks at most every 10 s, only while
a thread other than the training one is busy: at most 0.2 % of the training thread's interpreter
time.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

MAX_STACKS = 3  # the most frequent stacks kept per thread
WINDOW_S = 0.001  # each sample holds the GIL this long, then frees it this long
RAN_NS = 50_000  # a thread that used this much CPU in a window ran in it (not a wake-up blip)
_BLOCK = bytes(32 << 10)  # hashed over and over while the GIL is free: tens of µs a call


def cpu_ns(ident: int) -> int | None:
    """Nanoseconds of CPU the thread ``ident`` has used, to the instant; None: gone."""
    try:
        return time.clock_gettime_ns(time.pthread_getcpuclockid(ident))
    except (OSError, OverflowError, ValueError):
        return None


def _cpu(idents: list[int]) -> dict[int, int | None]:
    return {ident: cpu_ns(ident) for ident in idents}


def _ran(before: dict[int, int | None], after: dict[int, int | None]) -> dict[int, int]:
    return {i: max(0, a - b) for i, b in before.items() if b is not None and (a := after[i])}


def held_and_free(idents: list[int]) -> tuple[dict[int, int], dict[int, int], int, int]:
    """How long each thread ran while this one held the GIL (``WINDOW_S``, busy in Python),
    then while it left it free (``WINDOW_S``, busy in C): ``(ran held, ran free, held ns,
    free ns)``."""
    start = time.perf_counter_ns()
    first = _cpu(idents)
    while time.perf_counter_ns() - start < WINDOW_S * 1e9:
        pass
    middle, held_end = _cpu(idents), time.perf_counter_ns()
    while time.perf_counter_ns() - held_end < WINDOW_S * 1e9:
        hashlib.sha256(_BLOCK).digest()  # C that releases the GIL (over 2 KiB) and burns a CPU
    last, end = _cpu(idents), time.perf_counter_ns()
    return _ran(first, middle), _ran(middle, last), held_end - start, end - held_end


class _Tally:
    """What the samples found, by thread ident."""

    def __init__(self) -> None:
        self.stacks: dict[int, Counter[tuple]] = {}
        self.busy: dict[int, Counter[tuple]] = {}  # the CPU used in the window after each stack
        self.held: Counter[int] = Counter()  # windows it ran in while the GIL was held
        self.free: Counter[int] = Counter()  # ... while it was free

    def sample(self, stack: Callable[[int], list[list]]) -> None:
        """Each thread's stack, then what it ran with the GIL held and free."""
        me = threading.get_ident()
        idents = [t.ident for t in threading.enumerate()
                  if t.ident is not None and t.ident != me and t.native_id]  # fmt: skip
        seen = {i: tuple(map(tuple, stack(i))) for i in sys._current_frames() if i in idents}
        for ident, frames in seen.items():
            self.stacks.setdefault(ident, Counter())[frames] += 1
        held, free, _, _ = held_and_free(idents)
        for ident, frames in seen.items():
            ran = held.get(ident, 0) + free.get(ident, 0)
            self.busy.setdefault(ident, Counter())[frames] += ran
        self.held.update(i for i, ns in held.items() if ns >= RAN_NS)
        self.free.update(i for i, ns in free.items() if ns >= RAN_NS)


def threads_sampled(
    training: int, count: int, interval: float, stack: Callable[[int], list[list]]
) -> dict[str, Any]:
    """``count`` samples ``interval`` s apart of every Python thread but the helper (the caller),
    each thread's frames as ``stack(ident)`` gives them, its stacks ranked by the CPU it used
    right after each was taken (where it works, not where it sleeps), then by how often they
    were seen, and in how many windows it ran while the GIL was held and while it was free:
    ``{"taken": n, "threads": [{"tid", "name", "daemon", "training", "samples", "ran_held",
    "ran_free", "stacks": [{"frames", "count"}, ...]}, ...]}``."""
    tally = _Tally()
    for i in range(count):
        if i:
            time.sleep(interval)
        tally.sample(stack)
    named = {t.ident: t for t in threading.enumerate()}
    threads = [_thread(named.get(i), i, tally, training) for i in tally.stacks]
    return {"taken": count, "threads": threads}


def _thread(thread: threading.Thread | None, ident: int, tally: _Tally,
            training: int) -> dict[str, Any]:  # fmt: skip
    seen, busy = tally.stacks[ident], tally.busy.get(ident, Counter())
    ranked = sorted(seen, key=lambda k: (busy[k], seen[k]), reverse=True)[:MAX_STACKS]
    top = [{"frames": [list(f) for f in k], "count": seen[k]} for k in ranked]
    return {
        "tid": (thread.native_id or 0) if thread is not None else 0,
        "name": thread.name if thread is not None else "",
        "daemon": bool(thread.daemon) if thread is not None else False,
        "training": ident == training,
        "samples": sum(seen.values()),
        "ran_held": tally.held[ident],
        "ran_free": tally.free[ident],
        "stacks": top,
    }
