"""CPU demand, not only CPU use: how long threads waited on a run queue, and how many want one.

``utime + stime`` say how much CPU a process got; they cannot say how much it wanted.  The
scheduler keeps both for every thread (``/proc/PID/task/TID/schedstat``: ns on a CPU, ns
runnable but waiting for one, timeslices; Documentation/scheduler/sched-stats.rst).  The
waiting time is what ``pidstat -u`` reports as %wait and delay accounting as CPU delay: a
thread that is runnable and not running waits only because every CPU it may use is busy.

``/proc/PID/schedstat`` is the *main thread's* line, not a sum (the kernel prints the task the
pid names), so a process's figure is the sum over its threads, and each interval's wait is the
sum of each thread's growth: a thread born in the interval counts whole, one that exited is
lost (the kernel keeps no group total of the wait).

Cost, against a monitor budget of about 1 % of a core: only the rows the table shows are read,
a single-threaded process with one file, a process that got no CPU time since the last tick not
at all (it slept, or starved so badly that its CPU column already says so), a process with more
than ``SUM_THREADS_MAX`` threads only when it is one of the few that matter (GPU holders,
trainers with DataLoader workers, the busiest few: the collector chooses).  Thread states are
not read thread by thread (a second file per thread doubled the cost): the process's own state
letter comes free with its ``stat`` line, and "busy" threads (runnable at least half of the
interval) say over the whole interval what one instant's R count would say by chance.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import NamedTuple

from traintop.collectors import procfs
from traintop.collectors.open_files import OpenFiles
from traintop.collectors.rates import measured

NS_PER_S = 1e9
BUSY_SHARE = 0.5
"""A thread runnable (running or waiting) at least this share of the interval counts as busy:
it wants a CPU more than it sleeps, so it competes for the cores rather than idling in a pool."""
THREAD_SHOWN_PCT = 5.0
"""A thread other than the main one is listed on its own from this share of the interval on."""
SUM_THREADS_MAX = 64
"""Beyond this many threads a process outside the chosen few gets no wait figure: one read per
thread, every tick, for a row that is rarely the point (a JVM or a browser with hundreds)."""

Threads = dict[int, "SchedStat"]
Reading = tuple[float, Threads, float]
"""When a process was last read (or seen asleep), its threads' counters, their summed wait (s)."""


class SchedStat(NamedTuple):
    """One ``schedstat`` reading: cumulative nanoseconds on a CPU and waiting for one."""

    run_ns: int
    wait_ns: int


@dataclass(frozen=True, slots=True)
class ThreadDetail:
    """One process's threads over one interval (``main_*``: its first thread, the Python
    interpreter's own in a trainer; percentages: 100 = the whole interval)."""

    busy: int
    main_cpu_pct: float | None
    main_wait_pct: float | None
    # The other threads that ran at least ``THREAD_SHOWN_PCT``: (tid, run %, wait %), busiest
    # first (a second thread that takes the interpreter from the training loop shows here)
    others: tuple[tuple[int, float, float], ...] = ()


class Demand(NamedTuple):
    """What one tick says about a process: wait %, cumulative wait s, thread detail."""

    wait_pct: float | None
    wait_s: float | None
    detail: ThreadDetail | None


NO_DEMAND = Demand(None, None, None)
"""For a process with too many threads to read (see ``SUM_THREADS_MAX``)."""


def available(proc_root: str = "/proc") -> bool:
    """Whether the kernel keeps scheduler statistics (CONFIG_SCHED_INFO) in this /proc."""
    return os.path.exists(os.path.join(proc_root, "self", "schedstat"))


def parse(raw: bytes) -> SchedStat:
    """``b"343602221 355258 23\\n"`` -> ``SchedStat(343602221, 355258)``."""
    run, wait, _ = raw.split(None, 2)
    return SchedStat(int(run), int(wait))


class SchedReader:
    """Reads schedstat files and turns their counters into per-interval percentages.

    Keys are the collector's ``(pid, create_time)``, so a recycled pid starts afresh; call
    :meth:`forget` with the live keys each tick so nothing outgrows the process table.
    """

    def __init__(
        self,
        proc_root: str = "/proc",
        files: OpenFiles | None = None,
        processes: procfs.PidFiles | None = None,
    ) -> None:
        """``processes``: where to read a process's own ``/proc/PID/schedstat`` (``procfs``
        keeps those open while the process lives; thread files are opened in ``files``)."""
        self._root = proc_root
        self._prev: dict[tuple, Reading] = {}
        self._files = OpenFiles() if files is None else files
        self._processes = processes

    def sample(
        self,
        key: tuple,
        pid: int,
        now: float,
        threads: int,
        ran: bool,
        detailed: bool,
        line: bytes | None = None,
    ) -> Demand:
        """This tick's :class:`Demand` of one process (see the module doc for what is read);
        ``line``: its ``schedstat`` line if already read this tick (``procfs`` reads a kernel
        thread's)."""
        prev = self._prev.get(key)
        if not ran and prev is not None:
            self.asleep(key, now)
            return Demand(0.0, prev[2], _asleep(prev[1], pid) if detailed else None)
        if threads == 1:
            seen = {pid: parse(line or self._process_line(pid))}
        elif detailed or threads <= SUM_THREADS_MAX:
            known = prev[1] if prev is not None and len(prev[1]) == threads else None
            seen = self._threads(pid, known)
        else:
            return NO_DEMAND
        total = _total(seen)
        self._prev[key] = (now, seen, total)
        wait = _grown_pct(prev, now, seen)
        detail = _detail(prev, now, seen, pid) if detailed and prev is not None else None
        return Demand(wait, total, detail)

    def _process_line(self, pid: int) -> bytes:
        if self._processes is not None:
            return self._processes.read(pid)
        return self._files.read(f"{self._root}/{pid}/schedstat", pid)

    def asleep(self, key: tuple, now: float) -> None:
        """A process seen asleep (no CPU time since its last sample) accrued no wait: its next
        interval starts now.  For a row whose figures are last tick's again, without asking."""
        prev = self._prev.get(key)
        if prev is not None:
            self._prev[key] = (now, *prev[1:])

    def _threads(self, pid: int, known: Threads | None) -> Threads:
        """Every thread's schedstat; a thread that exits meanwhile is skipped.

        Listing ``task/`` costs more than reading a few threads, so while the thread count
        (from ``stat``, free) matches the last reading, the same threads are read again; one
        that is gone means others came, and the directory is listed after all.
        """
        seen: Threads = {}
        for tid in known or _tids(self._root, pid):
            try:
                seen[tid] = parse(self._files.read(f"{self._root}/{pid}/task/{tid}/schedstat", tid))
            except (procfs.NoSuchProcess, procfs.AccessDenied, ValueError):
                if known:
                    return self._threads(pid, None)
        return seen

    def forget(self, alive: Collection) -> None:
        """Drop the readings of processes that are gone; close files nobody read this tick."""
        self._prev = {k: v for k, v in self._prev.items() if k in alive}
        self._files.end_tick()


def _tids(root: str, pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"{root}/{pid}/task")]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []


def _total(seen: Threads) -> float:
    """Seconds the live threads have waited since they started."""
    return sum(stat.wait_ns for stat in seen.values()) / NS_PER_S


def _grown_pct(prev: Reading | None, now: float, seen: Threads) -> float | None:
    """Summed wait growth of every thread since ``prev`` as a percent of the interval (a
    thread born meanwhile counts from 0); ``None`` without a previous reading."""
    if prev is None or now <= prev[0]:
        return None
    before = prev[1]
    grown = sum(s.wait_ns - (before[t].wait_ns if t in before else 0) for t, s in seen.items())
    return measured(100.0 * grown / NS_PER_S / (now - prev[0]))


def _detail(prev: Reading, now: float, seen: Threads, pid: int) -> ThreadDetail:
    main = _thread_pcts(prev, now, seen, pid)
    return ThreadDetail(_busy(prev, now, seen), main[0], main[1], _others(prev, now, seen, pid))


def _others(prev: Reading, now: float, seen: Threads, pid: int) -> tuple:
    """The threads but the main one that ran ``THREAD_SHOWN_PCT`` or more, busiest first."""
    then, before, _ = prev
    if now <= then:
        return ()
    dt_ns = (now - then) * NS_PER_S
    floor_ns = THREAD_SHOWN_PCT / 100.0 * dt_ns
    found = []
    for tid, s in seen.items():
        old = before.get(tid)
        if tid == pid or old is None or s.run_ns - old.run_ns < floor_ns:
            continue
        run, wait = s.run_ns - old.run_ns, s.wait_ns - old.wait_ns
        found.append((tid, measured(100.0 * run / dt_ns), measured(100.0 * wait / dt_ns)))
    return tuple(sorted(found, key=lambda t: -t[1]))


def _asleep(seen: Threads, pid: int) -> ThreadDetail:
    """A process that got no CPU time: no thread busy, its main thread neither ran nor waited."""
    return ThreadDetail(0, 0.0 if pid in seen else None, 0.0 if pid in seen else None)


def _busy(prev: Reading, now: float, seen: Threads) -> int:
    """Threads runnable (on a CPU or waiting for one) at least ``BUSY_SHARE`` of the interval."""
    then, before, _ = prev
    if now <= then:
        return 0
    floor_ns = BUSY_SHARE * NS_PER_S * (now - then)
    return sum(
        1
        for tid, s in seen.items()
        if tid in before
        and s.run_ns - before[tid].run_ns + s.wait_ns - before[tid].wait_ns >= floor_ns
    )


def _thread_pcts(
    prev: Reading | None, now: float, seen: Threads, tid: int
) -> tuple[float | None, float | None]:
    """Run and wait percent of one thread over the interval."""
    if prev is None or now <= prev[0] or tid not in prev[1] or tid not in seen:
        return None, None
    dt_ns = (now - prev[0]) * NS_PER_S
    old, new = prev[1][tid], seen[tid]
    run, wait = new.run_ns - old.run_ns, new.wait_ns - old.wait_ns
    return measured(100.0 * run / dt_ns), measured(100.0 * wait / dt_ns)
