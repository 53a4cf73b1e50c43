"""Processes: the busiest by CPU, memory and I/O, every GPU holder, and DataLoader workers.

Cost is the constraint: a monitor that eats a core hides the problem it is looking for.  On Linux
the collector reads ``/proc`` directly (``traintop.collectors.procfs``: a ``stat`` read per process
per tick, an ``io`` read for those that ran); elsewhere it uses psutil.  It ranks every process by
CPU, RSS and I/O and keeps the top N of each (all of them with ``top_n=None``), so the table is
right whichever column it is sorted by.  Static facts (name, cmdline, user) are read once per
process lifetime, keyed by ``(pid, create_time)`` so a recycled pid never inherits another process's
name or CPU history.  The rows chosen also get their CPU demand (run-queue wait, busy threads:
``traintop.collectors.schedstat``).  Most processes sleep through most ticks: one whose stat line
did not change keeps last tick's reading, and its row, unless something around it changed.
"""

from __future__ import annotations

import heapq
import os
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from types import ModuleType
from typing import Any, NamedTuple

import psutil

from traintop.collectors import procfs, schedstat
from traintop.collectors.rates import rate
from traintop.collectors.snapshot import ProcessSnapshot, ThreadCpu, WorkerSnapshot

Key = tuple[int, float]
"""A process identity that survives pid reuse: ``(pid, create_time)``."""

TORCH_PROCESS_NAMES = ("pt_main_thread", "pt_data_worker")
"""Names newer torch gives a trainer's main thread and its DataLoader workers (via prctl)."""

HEAP_FROM = 10
"""Top N by a heap rather than a sort from this many times N processes (measured crossover)."""

DETAIL_TOP_N = 8
"""The busiest processes that get per-thread figures (busy threads, main thread) whatever their
thread count, beside GPU holders and trainers with DataLoader workers."""


@dataclass(frozen=True, slots=True)
class _Static:
    """Facts that never change during a process's life, read once."""

    name: str
    argv: tuple[str, ...]
    user: str | None
    is_python: bool
    """A Python interpreter, possibly renamed by torch: the only kind of trainer we group.
    Asked of every shown parent every tick, so decided once (``_is_python``)."""

    def is_worker_of(self, parent: _Static) -> bool:
        """DataLoader-style child: torch-named, a fork (same argv), or a multiprocessing spawn."""
        line = " ".join(self.argv)
        return (
            self.name == "pt_data_worker"
            or (bool(self.argv) and self.argv == parent.argv)
            or "spawn_main" in line
            or "--multiprocessing-fork" in line
        )


class _Light(NamedTuple):
    """One tick's reading of a process: everything that ranks it, before it is chosen.

    A NamedTuple rather than a frozen dataclass: one is made per process per tick, and a
    frozen dataclass pays an ``object.__setattr__`` per field.  The sort keys are fields, made
    once, so ranking a thousand processes three ways calls no Python per comparison.
    """

    proc: Any
    key: Key
    ppid: int | None
    cpu_s: float
    cpu_pct: float | None
    rss: int
    threads: int
    io: tuple[float | None, float | None]
    io_total: float
    cpu_rank: tuple[float, float]
    """Busiest first (descending); processes without a reading yet (first tick) after every
    measured one, by total CPU time."""
    steady: bool
    """Idle, and a reading now would be the same if it stays idle: see ``_steady``."""


def _make_light(
    proc: Any, key: Key, ppid: int | None, cpu_s: float, cpu_pct: float | None, rss: int,
    threads: int, io: tuple[float | None, float | None], io_known: bool,
) -> _Light:  # fmt: skip
    """A reading with its sort keys filled in; ``io_known``: its I/O counters are on record."""
    io_total = (io[0] or 0.0) + (io[1] or 0.0)  # unknown counts as none, for ranking only
    cpu_rank = (-1.0 if cpu_pct is None else cpu_pct, cpu_s)
    steady = _steady(cpu_pct, io, io_known)
    return _Light(proc, key, ppid, cpu_s, cpu_pct, rss, threads, io, io_total, cpu_rank, steady)


def _steady(cpu_pct: float | None, io: tuple[float | None, float | None], io_known: bool) -> bool:
    """Whether a process that stays idle reads the same next tick, so that its reading can be
    reused while ``procfs`` hands it back unchanged (its stat line the same, byte for byte).

    Its CPU time will not have grown, so it gets 0 % and I/O 0 without a read of its counters:
    the same reading if it was idle already and its counters were on record, or if they were
    unreadable (another user's process), where a reading next tick would be the first.  Most
    processes sleep, so most of a thousand cost a ``pread`` and a comparison.
    """
    if cpu_pct != 0.0:
        return False
    return io == (0.0, 0.0) or (io == (None, None) and not io_known)


class _Shown(NamedTuple):
    """A row and what it was made of, to hand it back unchanged next tick."""

    entry: _Light
    context: tuple[int | None, int | None, bool]
    """GPU memory, trainer pid (of a worker), per-thread figures wanted."""
    facts: tuple
    row: ProcessSnapshot
    repeats: bool
    """Its CPU demand is what a process that sleeps on reads again (see ``_repeats``)."""


class ProcessCollector:
    """Samples processes with injected ``ps`` (psutil, ``traintop.collectors.procfs.Procfs`` or a
    fake)."""

    def __init__(
        self,
        ps: ModuleType | Any = psutil,
        clock: Callable[[], float] = time.monotonic,
        top_n: int | None = 30,
        demand: bool = True,
    ):
        """``demand=False`` skips scheduler statistics (WAIT%, thread states): the baseline
        ``benchmarks/bench_schedstat.py`` measures their cost against."""
        # psutil itself is the portable fallback; on Linux the same facts come 3x cheaper.
        self._ps = procfs.Procfs() if ps is psutil and procfs.available() else ps
        self._clock = clock
        self._top_n = top_n
        self._gone = (ps.NoSuchProcess, ps.ZombieProcess, ps.AccessDenied)
        self._prev_t: float | None = None
        self._prev_cpu: dict[Key, float] = {}
        self._prev_io: dict[Key, tuple[float, int, int]] = {}
        self._static: dict[Key, _Static] = {}
        self._procfs = isinstance(self._ps, procfs.Procfs)
        self._reading = procfs.ProcfsProcess.reading if self._procfs else _psutil_reading
        self._sched = self._sched_reader() if demand else None
        self._now = 0.0
        self._light_table: list[_Light] = []
        self._last: dict[int, _Light] = {}
        self._rows: dict[Key, _Shown] = {}
        self.total: int | None = None  # processes the last scan found (None: it failed)

    def _sched_reader(self) -> schedstat.SchedReader | None:
        """Scheduler statistics from the same /proc, where the kernel keeps them."""
        if not self._procfs or not schedstat.available(self._ps.root):
            return None
        return schedstat.SchedReader(self._ps.root, processes=self._ps.sched)

    def collect(self, gpu_mem: Mapping[int, int] | None = None) -> tuple[ProcessSnapshot, ...]:
        """Rows to show, each trainer followed by its workers; ``gpu_mem`` maps pid -> bytes."""
        gpu_mem = gpu_mem or {}
        now = self._clock()
        dt = 0.0 if self._prev_t is None else now - self._prev_t
        self.total = None
        light = self._scan(dt, now)
        self.total = len(light)
        self._prev_t, self._now = now, now
        chosen, groups = self._choose(light, gpu_mem)
        detail = _detailed(chosen, groups, gpu_mem)
        previous, self._rows = self._rows, {}
        rows = [row for e in chosen if (row := self._row(e, gpu_mem, groups, detail, previous))]
        return tuple(order_rows(rows))

    def workers_of(self, pids: Iterable[int]) -> dict[int, tuple[WorkerSnapshot, ...]]:
        """The last scan's children of each trainer in ``pids``, for the job collector.

        One scan serves every job (no per-trainer process walk).  A child that is itself one of
        ``pids`` is a rank, never a worker: Lightning's launcher makes rank 1 a child of rank 0.
        """
        pids = set(pids)
        found: dict[int, list[WorkerSnapshot]] = defaultdict(list)
        for e in self._light_table:
            if e.ppid in pids and e.proc.pid not in pids:
                found[e.ppid].append(WorkerSnapshot(e.proc.pid, e.cpu_pct, e.rss, e.io[0]))
        return {pid: tuple(kids) for pid, kids in found.items()}

    def threads_of(self, pid: int) -> tuple[ThreadCpu, ...]:
        """The last collect's busy threads of ``pid`` other than its main one (where its
        threads were read one by one; else none)."""
        row = next((s.row for s in self._rows.values() if s.row.pid == pid), None)
        return row.thread_cpu if row is not None else ()

    def _scan(self, dt: float, now: float) -> list[_Light]:
        """Every live process's reading; the per-process caches follow the process table."""
        light = [e for p in self._ps.process_iter() if (e := self._light(p, dt, now)) is not None]
        prev_cpu = {entry.key: entry.cpu_s for entry in light}
        self._forget(self._prev_cpu.keys() - prev_cpu.keys(), prev_cpu.keys())
        self._prev_cpu, self._light_table = prev_cpu, light
        if self._procfs:
            self._last = {entry.proc.pid: entry for entry in light}
        return light

    def _light(self, proc: Any, dt: float, now: float) -> _Light | None:
        """One process's reading (its io read only if it ran); None if it is gone.  Last tick's,
        when ``procfs`` hands back the same process object (its stat line did not change) and
        that reading would come out the same (see ``_steady``)."""
        last = self._last.get(proc.pid)
        if last is not None and last.proc is proc and last.steady and dt > 0:
            return last
        try:
            key, ppid, cpu_s, rss, threads = self._reading(proc)
            prev_cpu = self._prev_cpu.get(key)
            io = self._io(proc, key, now, idle=prev_cpu == cpu_s)
        except self._gone:
            return None
        cpu_pct = rate(prev_cpu, cpu_s, dt, scale=100.0)
        io_known = key in self._prev_io
        return _make_light(proc, key, ppid, cpu_s, cpu_pct, rss, threads, io, io_known)

    def _io(self, proc: Any, key: Key, now: float, idle: bool) -> tuple[float | None, float | None]:
        """I/O rates, reading the counters only of processes that ran since the last tick.

        Reading and writing take system calls, so a process that used no CPU time did no I/O
        worth showing: it gets 0 without a read of ``/proc/<pid>/io``, which halves the scan
        (most processes sleep).  Its previous counters are kept, so I/O too small to cost a
        clock tick is still counted, averaged over the ticks it spanned, at its next reading.
        """
        if idle and key in self._prev_io:
            return 0.0, 0.0
        return self._io_rates(key, now, self._io_counters(proc))

    def _forget(self, dead: Iterable[Key], alive: Collection[Key]) -> None:
        """Prune per-process caches of the processes gone since the last tick."""
        for key in dead:
            self._static.pop(key, None)
            self._prev_io.pop(key, None)
        if self._sched is not None:
            self._sched.forget(alive)

    def _choose(
        self, light: list[_Light], gpu_mem: Mapping[int, int]
    ) -> tuple[list[_Light], dict[Key, int]]:
        """Top N by CPU, RSS and I/O, every GPU holder, then the workers of those chosen.

        Returns the chosen readings and, for each DataLoader worker, its trainer's pid.
        """
        chosen = {e.key: e for e in light if e.proc.pid in gpu_mem}
        for rank in _RANKS:
            chosen.update({e.key: e for e in _top(light, rank, self._top_n)})
        children = _children_of({e.proc.pid for e in chosen.values()}, light)
        groups: dict[Key, int] = {}
        for parent in list(chosen.values()):
            for worker in self._workers(parent, children.get(parent.proc.pid, ())):
                chosen[worker.key] = worker
                groups[worker.key] = parent.proc.pid
        return list(chosen.values()), groups

    def _workers(self, parent: _Light, kids: Iterable[_Light]) -> Iterable[_Light]:
        """The children of ``parent`` that are its DataLoader workers (none if not Python)."""
        if not kids:
            return ()
        parent_static = self._static_of(parent)
        if parent_static is None or not parent_static.is_python:
            return ()
        return [
            kid
            for kid in kids
            if kid.key[1] >= parent.key[1]  # a recycled parent pid is younger than its "child"
            and (static := self._static_of(kid)) is not None
            and static.is_worker_of(parent_static)
        ]

    def _static_of(self, entry: _Light) -> _Static | None:
        """Cached name/argv/user; ``None`` if the process vanished before we could read them."""
        if entry.key not in self._static:
            try:
                self._static[entry.key] = _read_static(entry.proc, self._ps.AccessDenied)
            except self._gone:
                return None
        return self._static[entry.key]

    def _row(
        self,
        entry: _Light,
        gpu_mem: Mapping[int, int],
        groups: Mapping[Key, int],
        detail: set[Key],
        previous: Mapping[Key, _Shown],
    ) -> ProcessSnapshot | None:
        """The snapshot row of one chosen process; ``None`` if it vanished meanwhile.

        A row that reads as it did last tick is last tick's row: most shown processes sleep,
        and a frozen dataclass of 18 fields costs more to build than the rest of its row.  One
        whose reading is last tick's too (see ``_light``) is not even read again.
        """
        key = entry.key
        context = (gpu_mem.get(entry.proc.pid), groups.get(key), key in detail)
        last = previous.get(key)
        if last is not None and last.entry is entry and last.repeats and last.context == context:
            return self._again(last)
        static = self._static_of(entry)
        demand = None if static is None else self._demand(entry, context[2])
        if static is None or demand is None:
            return None
        facts = (entry[2:8], *context[:2], demand)
        reused = last.row if last is not None and last.facts == facts else None
        row = reused if reused is not None else _snapshot(entry.proc.pid, static, facts)
        self._rows[key] = _Shown(entry, context, facts, row, _repeats(demand))
        return row

    def _again(self, shown: _Shown) -> ProcessSnapshot:
        """Last tick's row of a process asleep through both ticks: same reading, same demand."""
        if self._sched is not None:
            self._sched.asleep(shown.entry.key, self._now)
        self._rows[shown.entry.key] = shown
        return shown.row

    def _demand(self, entry: _Light, detailed: bool) -> tuple | None:
        """State and run-queue wait of one row (see ``traintop.collectors.schedstat``); ``None`` if
        the
        process vanished, ``()`` where the kernel keeps no scheduler statistics."""
        if self._sched is None:
            return ()
        proc, ran = entry.proc, entry.cpu_pct != 0.0
        try:
            found = self._sched.sample(
                entry.key, proc.pid, self._now, entry.threads, ran, detailed, proc.sched
            )
        except self._gone:
            return None
        return proc.state(), found

    def _io_counters(self, proc: Any) -> Any:
        """``io_counters()``, or ``None`` for other users' processes and platforms without it."""
        try:
            return proc.io_counters()
        except (self._ps.AccessDenied, AttributeError, NotImplementedError, KeyError, ValueError):
            return None  # KeyError, ValueError: counters procfs could not parse

    def _io_rates(self, key: Key, now: float, io: Any) -> tuple[float | None, float | None]:
        """Disk read/write bytes/s since this process's previous tick."""
        if io is None:
            return None, None
        prev = self._prev_io.get(key)
        self._prev_io[key] = (now, io.read_bytes, io.write_bytes)
        if prev is None:
            return None, None
        dt = now - prev[0]
        return rate(prev[1], io.read_bytes, dt), rate(prev[2], io.write_bytes, dt)


def _detailed(
    chosen: list[_Light], groups: Mapping[Key, int], gpu_mem: Mapping[int, int]
) -> set[Key]:
    """The rows that get per-thread figures: the busiest few, GPU holders, and trainers with
    DataLoader workers (their workers are usually single-threaded: the process figure says
    it all)."""
    leaders = set(groups.values())
    keys = {e.key for e in _top(chosen, _RANKS[0], DETAIL_TOP_N)}
    keys.update(e.key for e in chosen if e.proc.pid in gpu_mem or e.proc.pid in leaders)
    return keys


def _snapshot(pid: int, static: _Static, facts: tuple) -> ProcessSnapshot:
    """A row from ``(reading from ppid to io, GPU memory, group pid, CPU demand)``."""
    (ppid, _, cpu_pct, rss, threads, io), gpu_mem, group_pid, demand = facts
    return ProcessSnapshot(
        pid=pid,
        ppid=ppid,
        user=static.user,
        name=static.name,
        cmdline=" ".join(static.argv) or f"[{static.name}]",
        cpu_pct=cpu_pct,
        rss_bytes=rss,
        read_bytes_per_s=io[0],
        write_bytes_per_s=io[1],
        gpu_mem_bytes=gpu_mem,
        num_threads=threads,
        group_pid=group_pid,
        **_demand_fields(demand),
    )


def _repeats(demand: tuple) -> bool:
    """Whether a process that sleeps on gets this CPU demand again: none kept (``()``), the
    figures of one asleep since its last sample (no wait), or none for its thread count.  The
    first sample of a process (no wait figure yet) is followed by an asleep one, not by this."""
    return not demand or demand[1].wait_pct == 0.0 or demand[1] == schedstat.NO_DEMAND


def _demand_fields(demand: tuple) -> dict[str, Any]:
    """``ProcessSnapshot`` fields of a ``(state, schedstat.Demand)`` pair; none for ``()``."""
    if not demand:
        return {}
    state, found = demand
    fields = {"state": state, "cpu_wait_pct": found.wait_pct, "cpu_wait_s": found.wait_s}
    if found.detail is not None:
        fields["threads_busy"] = found.detail.busy
        fields["main_thread_cpu_pct"] = found.detail.main_cpu_pct
        fields["main_thread_wait_pct"] = found.detail.main_wait_pct
        fields["thread_cpu"] = tuple(ThreadCpu(*t) for t in found.detail.others)
    return fields


def _psutil_reading(proc: Any) -> tuple[Key, int, float, int, int]:
    """``(key, ppid, cpu seconds, rss, threads)`` through the psutil API, in one batch."""
    with proc.oneshot():
        times, rss = proc.cpu_times(), proc.memory_info().rss
        key = (proc.pid, proc.create_time())
        return key, proc.ppid(), times.user + times.system, rss, proc.num_threads()


_RANKS = (attrgetter("cpu_rank"), attrgetter("rss"), attrgetter("io_total"))
"""Sort keys, all descending: CPU (see ``_Light.cpu_rank``), RSS, I/O."""


def _top(light: list[_Light], rank: Callable[[_Light], Any], n: int | None) -> list[_Light]:
    """The ``n`` greatest by ``rank`` (all with ``None``), ties in scan order.

    ``heapq.nlargest`` is documented to equal ``sorted(..., reverse=True)[:n]``, ties included;
    it takes half the time of a sort at a thousand processes, twice the time at a hundred.
    """
    if n is None or len(light) <= HEAP_FROM * n:
        return sorted(light, key=rank, reverse=True)[:n]
    return heapq.nlargest(n, light, rank)


def _children_of(pids: Collection[int], light: list[_Light]) -> dict[int | None, list[_Light]]:
    """Children of each of ``pids`` that has any, in scan order."""
    children: dict[int | None, list[_Light]] = defaultdict(list)
    for entry in light:
        if entry.ppid in pids:
            children[entry.ppid].append(entry)
    return children


def _read_static(proc: Any, denied: type[Exception]) -> _Static:
    """Read name, argv and user; a field we may not read is left empty rather than failing."""
    user = _or_default(proc.username, denied, None)
    name = printable(proc.name())
    argv = tuple(printable(arg) for arg in _or_default(proc.cmdline, denied, []))
    user = None if user is None else printable(user)
    return _Static(name=name, argv=argv, user=user, is_python=_is_python(name, argv))


def _is_python(name: str, argv: tuple[str, ...]) -> bool:
    """Whether the process is a Python interpreter (by name or program), or a torch-renamed one."""
    exe = os.path.basename(argv[0]) if argv else ""
    return name.startswith("python") or exe.startswith("python") or name in TORCH_PROCESS_NAMES


def printable(text: str) -> str:
    """``text`` with every non-printable character shown as "?", as ps(1) does.

    Any user names their own processes: an escape sequence in a name or argument must reach
    the monitor's terminal as text, never as a command to that terminal.
    """
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else "?" for char in text)


def _or_default(read: Callable[[], Any], denied: type[Exception], default: Any) -> Any:
    """``read()``, or ``default`` when access is denied (hidepid mounts, other users)."""
    try:
        return read()
    except denied:
        return default


def _cpu_sort(cpu_pct: float | None) -> float:
    """Sort key that puts processes without a CPU reading (first tick) after measured ones."""
    return -1.0 if cpu_pct is None else cpu_pct


def order_rows(rows: Iterable[ProcessSnapshot]) -> list[ProcessSnapshot]:
    """Busiest first, each process immediately followed by its group (recursively)."""
    rows = sorted(rows, key=lambda r: _cpu_sort(r.cpu_pct), reverse=True)
    shown = {row.pid for row in rows}
    kids: dict[int | None, list[ProcessSnapshot]] = defaultdict(list)
    for row in rows:
        kids[row.group_pid if row.group_pid in shown else None].append(row)
    ordered: list[ProcessSnapshot] = []
    stack = list(reversed(kids[None]))
    while stack:
        row = stack.pop()
        ordered.append(row)
        stack.extend(reversed(kids[row.pid]))
    return ordered
