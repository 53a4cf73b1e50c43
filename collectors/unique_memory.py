"""Each process's own memory (USS, PSS), read only while memory is a concern, within a budget.

RSS cannot show the most common way a training job runs out of memory: DataLoader workers are
forked, so each starts sharing every page of the trainer's dataset, and RSS counts those pages
in every process from the first instant.  Reading a Python object writes its reference count,
and the kernel then copies the page into the worker that wrote it (copy on write, here on
read): the worker's *unique* memory grows by the pages it touched while its RSS stays the same.
``/proc/PID/smaps_rollup`` (Linux 4.14) sums the process's pages by whether another process
maps them too: USS is ``Private_Clean + Private_Dirty`` (what its exit would free), PSS shares
each shared page among its mappers (the job's processes' PSS add up to what they take).

That walk of the page tables costs about 23 µs per resident MB on the 2-core VM (10 ms for a
trainer of 440 MB), far too much for every tick.  So it is done only for the jobs whose memory
is a concern (``concern``: near its limit, or growing toward it), each process at most every
``EVERY_S``, and never more often than keeps the time spent under ``BUDGET`` of the sampler's
thread: after a read that took *t*, the next waits at least *t / BUDGET*.  A healthy job costs
nothing; a worker of 2 GB (about 50 ms a read) is read every 5 s.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from traintop.collectors.memory_state import UniqueMemory
from traintop.collectors.trend import History

EVERY_S = 5.0  # a process's unique memory at most this often
BUDGET = 0.01  # of one core: the reads' cost over the time between them
FORGET_S = 60.0
_KIB = 1024


def parse_rollup(text: bytes) -> tuple[int, int, int] | None:
    """``(uss, pss, swap)`` bytes from a ``smaps_rollup`` text; None without its lines."""
    values: dict[bytes, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(b":")
        words = rest.split()
        if words and words[0].isdigit():
            values[name] = int(words[0]) * _KIB
    try:
        uss = values[b"Private_Clean"] + values[b"Private_Dirty"]
        return uss, values[b"Pss"], values.get(b"Swap", 0)
    except KeyError:
        return None


class _Followed:
    __slots__ = ("at", "history", "seen", "started", "value")

    def __init__(self) -> None:
        self.at = -1e18
        self.seen = 0.0
        self.value: tuple[int, int, int] | None = None
        self.history = History()
        self.started: float | None = None  # CLOCK_BOOTTIME seconds when the process started


def started_at(proc: str, pid: int) -> float | None:
    """When ``pid`` started, in CLOCK_BOOTTIME seconds (``/proc/PID/stat`` field 22)."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class UniqueMemoryReader:
    """Reads ``smaps_rollup`` for the processes it is asked about, within ``BUDGET``."""

    def __init__(self, proc: str = "/proc", clock: Callable[[], float] = time.monotonic,
                 every_s: float = EVERY_S, budget: float = BUDGET) -> None:  # fmt: skip
        self._proc = proc
        self._clock = clock
        self._every_s = every_s
        self._budget = budget
        self._followed: dict[int, _Followed] = {}
        self._free_at = -1e18  # no read before this (the budget's wait)
        self.spent_s = 0.0  # time spent reading, for the benchmarks

    def read(self, pids: Iterable[int]) -> tuple[UniqueMemory, ...]:
        """The last reading of each of ``pids`` (those never read, or gone, are left out),
        reading afresh the ones due, oldest first, while the budget allows."""
        now = self._clock()
        wanted = list(dict.fromkeys(pids))
        for pid in wanted:
            self._followed.setdefault(pid, _Followed()).seen = now
        due = sorted((self._followed[p].at, p) for p in wanted)
        for at, pid in due:
            if now - at < self._every_s or now < self._free_at:
                break
            self._read_one(pid, now)
        self._forget(now)
        return tuple(m for pid in wanted if (m := self._shown(pid, now)) is not None)

    def _read_one(self, pid: int, now: float) -> None:
        followed = self._followed[pid]
        followed.at = now
        if followed.started is None:
            followed.started = started_at(self._proc, pid)
        started = time.perf_counter()
        try:
            with open(f"{self._proc}/{pid}/smaps_rollup", "rb", buffering=0) as f:
                value = parse_rollup(f.read())
        except OSError:
            value = None
        cost = time.perf_counter() - started
        self.spent_s += cost
        self._free_at = now + cost / self._budget
        followed.value = value
        if value is not None:
            followed.history.add(now, float(value[0]))

    def _shown(self, pid: int, now: float) -> UniqueMemory | None:
        followed = self._followed.get(pid)
        if followed is None or followed.value is None:
            return None
        uss, pss, swap = followed.value
        growth = followed.history.trend()
        age = None if followed.started is None else max(0.0, _boottime() - followed.started)
        return UniqueMemory(pid, uss, pss, swap, growth, max(0.0, now - followed.at), age)

    def _forget(self, now: float) -> None:
        for pid in [p for p, f in self._followed.items() if now - f.seen > FORGET_S]:
            del self._followed[pid]


def readable(proc: str = "/proc") -> bool:
    """Whether this kernel has ``smaps_rollup`` (4.14 and newer)."""
    return os.path.exists(f"{proc}/self/smaps_rollup")
