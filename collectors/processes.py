"""Processes: the busiest by CPU, memory and I/O, every GPU holder, and DataLoader workers.

Cost is the constraint: a monitor that eats a core hides the problem it is looking for.  On Linux
the collector reads ``/proc`` directly (``collectors.procfs``: one ``stat`` and one ``io`` read per
process per tick); elsewhere it uses psutil.  It ranks every process by CPU, RSS and I/O and keeps
the top N of each (all of them with ``top_n=None``), so the table is right whichever column it
is sorted by.  Static facts (name, cmdline, user) are read once per process lifetime, keyed by
``(pid, create_time)`` so a recycled pid never inherits another process's name or CPU history.
The rows chosen also get their CPU demand (run-queue wait, busy threads: ``collectors.schedstat``).
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

import psutil

from collectors import procfs, schedstat
from collectors.rates import rate
from collectors.snapshot import ProcessSnapshot, WorkerSnapshot

Key = tuple[int, float]
"""A process identity that survives pid reuse: ``(pid, create_time)``."""

TORCH_PROCESS_NAMES = ("pt_main_thread", "pt_data_worker")
"""Names newer torch gives a trainer's main thread and its DataLoader workers (via prctl)."""

DETAIL_TOP_N = 8
"""The busiest processes that get per-thread figures (busy threads, main thread) whatever their
thread count, beside GPU holders and trainers with DataLoader workers."""


@dataclass(frozen=True, slots=True)
class _Static:
    """Facts that never change during a process's life, read once."""

    name: str
    argv: tuple[str, ...]
    user: str | None

    @property
    def is_python(self) -> bool:
        """A Python interpreter, possibly renamed by torch: the only kind of trainer we group."""
        exe = os.path.basename(self.argv[0]) if self.argv else ""
        return (
            self.name.startswith("python")
            or exe.startswith("python")
            or (self.name in TORCH_PROCESS_NAMES)
        )

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
    frozen dataclass pays an ``object.__setattr__`` per field.
    """

    proc: Any
    key: Key
    ppid: int | None
    cpu_s: float
    cpu_pct: float | None
    rss: int
    threads: int
    io: tuple[float | None, float | None]

    @property
    def io_total(self) -> float:
        return sum(rate for rate in self.io if rate is not None)


class ProcessCollector:
    """Samples processes with injected ``ps`` (psutil, ``collectors.procfs`` or a fake)."""

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
        self._ps = procfs if ps is psutil and procfs.available() else ps
        self._clock = clock
        self._top_n = top_n
        self._gone = (ps.NoSuchProcess, ps.ZombieProcess, ps.AccessDenied)
        self._prev_t: float | None = None
        self._prev_cpu: dict[Key, float] = {}
        self._prev_io: dict[Key, tuple[float, int, int]] = {}
        self._static: dict[Key, _Static] = {}
        self._reading = procfs.ProcfsProcess.reading if self._ps is procfs else _psutil_reading
        on_linux = self._ps is procfs and schedstat.available()
        self._sched = schedstat.SchedReader() if demand and on_linux else None
        self._now = 0.0
        self._light_table: list[_Light] = []

    def collect(self, gpu_mem: Mapping[int, int] | None = None) -> tuple[ProcessSnapshot, ...]:
        """Rows to show, each trainer followed by its workers; ``gpu_mem`` maps pid -> bytes."""
        gpu_mem = gpu_mem or {}
        now = self._clock()
        dt = 0.0 if self._prev_t is None else now - self._prev_t
        light = [e for p in self._ps.process_iter() if (e := self._light(p, dt, now)) is not None]
        alive = {entry.key for entry in light}
        self._prev_cpu = {entry.key: entry.cpu_s for entry in light}
        self._forget_dead(alive)
        self._prev_t, self._now = now, now
        self._light_table = light
        chosen, groups = self._choose(light, gpu_mem)
        detail = _detailed(chosen, groups, gpu_mem)
        rows = [row for entry in chosen if (row := self._row(entry, gpu_mem, groups, detail))]
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

    def _light(self, proc: Any, dt: float, now: float) -> _Light | None:
        """One process's reading (one stat and one io read with procfs); None if it is gone."""
        try:
            key, ppid, cpu_s, rss, threads = self._reading(proc)
            prev_cpu = self._prev_cpu.get(key)
            io = self._io(proc, key, now, idle=prev_cpu == cpu_s)
        except self._gone:
            return None
        pct = rate(prev_cpu, cpu_s, dt)
        cpu_pct = None if pct is None else 100.0 * pct
        return _Light(proc, key, ppid, cpu_s, cpu_pct, rss, threads, io)

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

    def _forget_dead(self, alive: set[Key]) -> None:
        """Prune per-process caches so they never outgrow the live process table."""
        self._static = {k: v for k, v in self._static.items() if k in alive}
        self._prev_io = {k: v for k, v in self._prev_io.items() if k in alive}
        if self._sched is not None:
            self._sched.forget(alive)

    def _choose(
        self, light: list[_Light], gpu_mem: Mapping[int, int]
    ) -> tuple[list[_Light], dict[Key, int]]:
        """Top N by CPU, RSS and I/O, every GPU holder, then the workers of those chosen.

        Returns the chosen readings and, for each DataLoader worker, its trainer's pid.
        """
        chosen = {e.key: e for e in light if e.proc.pid in gpu_mem}
        for rank in (_by_cpu, _by_rss, _by_io):
            chosen.update({e.key: e for e in sorted(light, key=rank)[: self._top_n]})
        children: dict[int | None, list[_Light]] = defaultdict(list)
        for entry in light:
            children[entry.ppid].append(entry)
        groups: dict[Key, int] = {}
        for parent in list(chosen.values()):
            for worker in self._workers(parent, children[parent.proc.pid]):
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
    ) -> ProcessSnapshot | None:
        """The snapshot row of one chosen process; ``None`` if it vanished meanwhile."""
        static = self._static_of(entry)
        demand = None if static is None else self._demand(entry, entry.key in detail)
        if static is None or demand is None:
            return None
        return ProcessSnapshot(
            pid=entry.proc.pid,
            ppid=entry.ppid,
            user=static.user,
            name=static.name,
            cmdline=" ".join(static.argv) or f"[{static.name}]",
            cpu_pct=entry.cpu_pct,
            rss_bytes=entry.rss,
            read_bytes_per_s=entry.io[0],
            write_bytes_per_s=entry.io[1],
            gpu_mem_bytes=gpu_mem.get(entry.proc.pid),
            num_threads=entry.threads,
            group_pid=groups.get(entry.key),
            **demand,
        )

    def _demand(self, entry: _Light, detailed: bool) -> dict[str, Any] | None:
        """State and run-queue wait of one row (see ``collectors.schedstat``); ``None`` if the
        process vanished, no figures where the kernel keeps no scheduler statistics."""
        if self._sched is None:
            return {}
        pid, ran = entry.proc.pid, entry.cpu_pct != 0.0
        try:
            found = self._sched.sample(entry.key, pid, self._now, entry.threads, ran, detailed)
        except self._gone:
            return None
        fields = {"state": entry.proc.state(), "cpu_wait_pct": found.wait_pct}
        fields["cpu_wait_s"] = found.wait_s
        if found.detail is not None:
            fields.update(_thread_fields(found.detail))
        return fields

    def _io_counters(self, proc: Any) -> Any:
        """``io_counters()``, or ``None`` for other users' processes and platforms without it."""
        try:
            return proc.io_counters()
        except (self._ps.AccessDenied, AttributeError, NotImplementedError):
            return None

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
    keys = {e.key for e in sorted(chosen, key=_by_cpu)[:DETAIL_TOP_N]}
    keys.update(e.key for e in chosen if e.proc.pid in gpu_mem or e.proc.pid in leaders)
    return keys


def _thread_fields(detail: schedstat.ThreadDetail) -> dict[str, Any]:
    return {
        "threads_busy": detail.busy,
        "main_thread_cpu_pct": detail.main_cpu_pct,
        "main_thread_wait_pct": detail.main_wait_pct,
    }


def _psutil_reading(proc: Any) -> tuple[Key, int, float, int, int]:
    """``(key, ppid, cpu seconds, rss, threads)`` through the psutil API, in one batch."""
    with proc.oneshot():
        times, rss = proc.cpu_times(), proc.memory_info().rss
        key = (proc.pid, proc.create_time())
        return key, proc.ppid(), times.user + times.system, rss, proc.num_threads()


def _by_cpu(entry: _Light) -> tuple[float, float]:
    """Busiest first; processes without a reading yet (first tick) by total CPU time."""
    return (-(entry.cpu_pct if entry.cpu_pct is not None else -1.0), -entry.cpu_s)


def _by_rss(entry: _Light) -> int:
    return -entry.rss


def _by_io(entry: _Light) -> float:
    return -entry.io_total


def _read_static(proc: Any, denied: type[Exception]) -> _Static:
    """Read name, argv and user; a field we may not read is left empty rather than failing."""
    user = _or_default(proc.username, denied, None)
    return _Static(
        name=printable(proc.name()),
        argv=tuple(printable(arg) for arg in _or_default(proc.cmdline, denied, [])),
        user=None if user is None else printable(user),
    )


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
