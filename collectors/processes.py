"""Top processes by CPU, every GPU process, and the DataLoader workers of a shown trainer.

Cost is the constraint: a monitor that eats a core hides the problem it is looking for.  Each tick
reads only ``/proc/<pid>/stat`` for every process (CPU time and parent, one file under
``oneshot()``), picks the rows to show, and reads memory, threads and I/O for those rows only.
Static facts (name, cmdline, user) are read once per process lifetime, keyed by
``(pid, create_time)`` so a recycled pid never inherits another process's name or CPU history.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import psutil

from collectors.rates import rate
from collectors.snapshot import ProcessSnapshot

Key = tuple[int, float]
"""A process identity that survives pid reuse: ``(pid, create_time)``."""

TORCH_PROCESS_NAMES = ("pt_main_thread", "pt_data_worker")
"""Names newer torch gives a trainer's main thread and its DataLoader workers (via prctl)."""


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


@dataclass(frozen=True, slots=True)
class _Light:
    """The cheap per-tick reading taken for every process."""

    proc: Any
    key: Key
    ppid: int | None
    cpu_s: float
    cpu_pct: float | None


class ProcessCollector:
    """Samples processes with injected ``ps`` (psutil or a fake) and ``clock``."""

    def __init__(
        self,
        ps: ModuleType | Any = psutil,
        clock: Callable[[], float] = time.monotonic,
        top_n: int = 30,
    ):
        self._ps = ps
        self._clock = clock
        self._top_n = top_n
        self._gone = (ps.NoSuchProcess, ps.ZombieProcess, ps.AccessDenied)
        self._prev_t: float | None = None
        self._prev_cpu: dict[Key, float] = {}
        self._ppid: dict[Key, int | None] = {}
        self._prev_io: dict[Key, tuple[float, int, int]] = {}
        self._static: dict[Key, _Static] = {}

    def collect(self, gpu_mem: Mapping[int, int] | None = None) -> tuple[ProcessSnapshot, ...]:
        """Rows to show, each trainer followed by its workers; ``gpu_mem`` maps pid -> bytes."""
        gpu_mem = gpu_mem or {}
        now = self._clock()
        dt = 0.0 if self._prev_t is None else now - self._prev_t
        light = self._scan(dt)
        self._forget_dead({entry.key for entry in light})
        self._prev_t = now
        chosen = self._choose(light, gpu_mem)
        rows = {e.proc.pid: row for e in chosen if (row := self._row(e, now, gpu_mem))}
        python_pids = {e.proc.pid for e in chosen if e.proc.pid in rows and self._is_python(e)}
        return tuple(order_rows(group_rows(rows.values(), python_pids)))

    def _scan(self, dt: float) -> list[_Light]:
        """CPU time of every process (one stat read each); parents are cached from first sight."""
        light = [e for proc in self._ps.process_iter() if (e := self._light(proc, dt)) is not None]
        light = self._reparent_orphans(light)
        self._prev_cpu = {entry.key: entry.cpu_s for entry in light}
        self._ppid = {entry.key: entry.ppid for entry in light}
        return light

    def _light(self, proc: Any, dt: float) -> _Light | None:
        """One process's cheap reading.

        ``ppid()`` costs psutil a second stat read (its pid-reuse check), so it is read once per
        process and cached; it changes only when the parent dies (see ``_reparent_orphans``).
        ``create_time`` is cached by psutil, so a known process costs a single stat read and
        skips the ``oneshot()`` bookkeeping.
        """
        try:
            key = (proc.pid, proc.create_time())
            if key in self._ppid:
                times, ppid = proc.cpu_times(), self._ppid[key]
            else:
                with proc.oneshot():
                    times, ppid = proc.cpu_times(), proc.ppid()
        except self._gone:
            return None
        cpu_s = times.user + times.system
        pct = rate(self._prev_cpu.get(key), cpu_s, dt)
        return _Light(proc, key, ppid, cpu_s, None if pct is None else 100.0 * pct)

    def _reparent_orphans(self, light: list[_Light]) -> list[_Light]:
        """Re-read the parent of processes whose cached parent is gone (re-parented to init)."""
        alive = {entry.proc.pid for entry in light}
        return [
            entry if entry.ppid in alive or not entry.ppid else self._fresh_parent(entry)
            for entry in light
        ]

    def _fresh_parent(self, entry: _Light) -> _Light:
        """``entry`` with its current parent; unchanged if the process has just exited."""
        try:
            return replace(entry, ppid=entry.proc.ppid())
        except self._gone:
            return entry

    def _forget_dead(self, alive: set[Key]) -> None:
        """Prune per-process caches so they never outgrow the live process table."""
        self._static = {k: v for k, v in self._static.items() if k in alive}
        self._prev_io = {k: v for k, v in self._prev_io.items() if k in alive}

    def _choose(self, light: list[_Light], gpu_mem: Mapping[int, int]) -> list[_Light]:
        """Top N by CPU, every GPU holder, then the workers of every chosen Python process."""
        ranked = sorted(light, key=lambda e: (_cpu_sort(e.cpu_pct), e.cpu_s), reverse=True)
        chosen = {e.key: e for e in ranked[: self._top_n]}
        chosen.update({e.key: e for e in light if e.proc.pid in gpu_mem})
        children: dict[int, list[_Light]] = defaultdict(list)
        for entry in light:
            children[entry.ppid].append(entry)
        for parent in list(chosen.values()):
            chosen.update({w.key: w for w in self._workers(parent, children[parent.proc.pid])})
        return list(chosen.values())

    def _workers(self, parent: _Light, kids: Iterable[_Light]) -> Iterable[_Light]:
        """The children of ``parent`` that are its DataLoader workers (none if not Python)."""
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

    def _row(self, entry: _Light, now: float, gpu_mem: Mapping[int, int]) -> ProcessSnapshot | None:
        """Full row for one chosen process; ``None`` if it vanished meanwhile."""
        static = self._static_of(entry)
        if static is None:
            return None
        try:
            with entry.proc.oneshot():
                rss, threads = entry.proc.memory_info().rss, entry.proc.num_threads()
                io = self._io_counters(entry.proc)
        except self._gone:
            return None
        read_rate, write_rate = self._io_rates(entry.key, now, io)
        return ProcessSnapshot(
            pid=entry.proc.pid,
            ppid=entry.ppid,
            user=static.user,
            name=static.name,
            cmdline=" ".join(static.argv) or f"[{static.name}]",
            cpu_pct=entry.cpu_pct,
            rss_bytes=rss,
            read_bytes_per_s=read_rate,
            write_bytes_per_s=write_rate,
            gpu_mem_bytes=gpu_mem.get(entry.proc.pid),
            num_threads=threads,
        )

    def _io_counters(self, proc: Any) -> Any:
        """``io_counters()``, or ``None`` for other users' processes and platforms without it."""
        try:
            return proc.io_counters()
        except (self._ps.AccessDenied, AttributeError, NotImplementedError):
            return None

    def _io_rates(self, key: Key, now: float, io: Any) -> tuple[float | None, float | None]:
        """Disk read/write bytes/s since this process's previous shown tick."""
        if io is None:
            return None, None
        prev = self._prev_io.get(key)
        self._prev_io[key] = (now, io.read_bytes, io.write_bytes)
        if prev is None:
            return None, None
        dt = now - prev[0]
        return rate(prev[1], io.read_bytes, dt), rate(prev[2], io.write_bytes, dt)

    def _is_python(self, entry: _Light) -> bool:
        """Whether a chosen process (static facts already cached) is a Python interpreter."""
        static = self._static.get(entry.key)
        return static is not None and static.is_python


def _read_static(proc: Any, denied: type[Exception]) -> _Static:
    """Read name, argv and user; a field we may not read is left empty rather than failing."""
    name = proc.name()
    return _Static(
        name=name,
        argv=tuple(_or_default(proc.cmdline, denied, [])),
        user=_or_default(proc.username, denied, None),
    )


def _or_default(read: Callable[[], Any], denied: type[Exception], default: Any) -> Any:
    """``read()``, or ``default`` when access is denied (hidepid mounts, other users)."""
    try:
        return read()
    except denied:
        return default


def group_rows(rows: Iterable[ProcessSnapshot], python_pids: set[int]) -> list[ProcessSnapshot]:
    """Set ``group_pid`` on every shown child of a shown Python process (trainer -> workers)."""
    return [replace(row, group_pid=row.ppid) if row.ppid in python_pids else row for row in rows]


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
