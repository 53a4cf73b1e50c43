"""The part of psutil's process API that ``ProcessCollector`` uses, read straight from /proc.

Why not psutil itself: ``process_iter()`` plus ``cpu_times()``, ``ppid()``, ``memory_info()`` and
``num_threads()`` cost psutil several reads of ``/proc/<pid>/stat`` and a pid-reuse check per
process (3.9 ms per tick at 115 processes, 11.5 ms at 412), while all of those numbers sit in
that one file.  Here each process costs one read of ``stat`` per tick, plus ``io`` for the
rows that show I/O; name, argv and owner are read once per process by the collector's cache.
Errors are psutil's own exception types, so the collector treats both sources alike.  Use
``available()`` to decide: other platforms (and a /proc without stat files) keep psutil.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from collections.abc import Iterator
from typing import NamedTuple

import psutil

NoSuchProcess = psutil.NoSuchProcess
ZombieProcess = psutil.ZombieProcess
AccessDenied = psutil.AccessDenied

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PROC = "/proc"
KTHREADD_PID = 2
"""The parent of every kernel thread."""


class CpuTimes(NamedTuple):
    user: float
    system: float


class MemoryInfo(NamedTuple):
    rss: int
    vms: int


class IoCounters(NamedTuple):
    read_count: int
    write_count: int
    read_bytes: int
    write_bytes: int


_NO_IO = IoCounters(0, 0, 0, 0)


def available(proc_root: str = _PROC) -> bool:
    """Whether this system has a Linux-style /proc with per-process stat files."""
    return os.path.exists(os.path.join(proc_root, "self", "stat"))


def process_iter(proc_root: str = _PROC) -> Iterator[ProcfsProcess]:
    """Every process whose stat file could be read right now, in pid order of /proc."""
    for entry in os.listdir(proc_root):
        if entry.isdigit():
            with contextlib.suppress(NoSuchProcess, AccessDenied):
                yield ProcfsProcess(int(entry), proc_root)


def read_proc_file(path: str, pid: int) -> bytes:
    """One whole file of a process; a vanished process raises NoSuchProcess, EACCES AccessDenied.

    Raw ``os.open``/``os.read`` rather than ``open()``: no file object per read, 25 % cheaper.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            chunks = [os.read(fd, 4096)]
            while len(chunks[-1]) == 4096:
                chunks.append(os.read(fd, 4096))
        finally:
            os.close(fd)
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise NoSuchProcess(pid) from exc
    except PermissionError as exc:  # io is checked at read time (ptrace access), not at open
        raise AccessDenied(pid) from exc
    return b"".join(chunks)


_NO_BATCH = contextlib.nullcontext()


class ProcfsProcess:
    """One process, its stat line parsed once at construction (one tick's view of it).

    Every number the collector asks for is taken from the line here, in one pass: the
    collector reads a few hundred of these per tick, so per-call parsing added up.
    """

    __slots__ = (
        "_comm",
        "_cpu",
        "_create",
        "_dir",
        "_ppid",
        "_rss_pages",
        "_state",
        "_threads",
        "_vms",
        "pid",
    )

    def __init__(self, pid: int, proc_root: str = _PROC) -> None:
        self.pid = pid
        self._dir = f"{proc_root}/{pid}"
        raw = read_proc_file(f"{self._dir}/stat", pid)
        # comm sits in parentheses and may itself contain ") ", so split at the last one.
        head, _, rest = raw.rpartition(b")")
        self._comm = head.partition(b"(")[2].decode(errors="replace")
        # stat(5) fields 4 (ppid) .. 24 (rss); rest[0] is field 3 (state).
        fields = rest.split(None, 22)
        self._state = fields[0].decode(errors="replace")
        self._ppid = int(fields[1])
        self._cpu = (int(fields[11]), int(fields[12]))
        self._threads = int(fields[17])
        self._create = int(fields[19])
        self._vms, self._rss_pages = int(fields[20]), int(fields[21])

    def reading(self) -> tuple[tuple[int, float], int, float, int, int]:
        """``((pid, create_time), ppid, cpu seconds, rss bytes, threads)`` in one call: what the
        collector ranks every process by, without a method call per number."""
        cpu_s = (self._cpu[0] + self._cpu[1]) / _CLK_TCK
        created = self._create / _CLK_TCK
        return (self.pid, created), self._ppid, cpu_s, self._rss_pages * _PAGE, self._threads

    def oneshot(self) -> contextlib.AbstractContextManager[None]:
        """psutil's batching context; the stat line is already read, so there is nothing to do."""
        return _NO_BATCH

    def create_time(self) -> float:
        """Seconds after boot; only compared with other processes of the same source."""
        return self._create / _CLK_TCK

    def ppid(self) -> int:
        return self._ppid

    def state(self) -> str:
        """The main thread's state letter, as ps's STAT column: R, S, D, Z, T..."""
        return self._state

    def cpu_times(self) -> CpuTimes:
        return CpuTimes(self._cpu[0] / _CLK_TCK, self._cpu[1] / _CLK_TCK)

    def memory_info(self) -> MemoryInfo:
        return MemoryInfo(self._rss_pages * _PAGE, self._vms)

    def num_threads(self) -> int:
        return self._threads

    def name(self) -> str:
        return self._comm

    def cmdline(self) -> list[str]:
        raw = read_proc_file(f"{self._dir}/cmdline", self.pid)
        return [arg.decode(errors="replace") for arg in raw.rstrip(b"\0").split(b"\0") if arg]

    def username(self) -> str:
        try:
            uid = os.stat(self._dir).st_uid
        except FileNotFoundError as exc:
            raise NoSuchProcess(self.pid) from exc
        return _user_name(uid)

    def io_counters(self) -> IoCounters:
        if self._ppid == KTHREADD_PID or self.pid == KTHREADD_PID:
            return _NO_IO  # kernel threads do no file I/O of their own: skip one read each
        values = {}
        for line in read_proc_file(f"{self._dir}/io", self.pid).splitlines():
            key, _, value = line.partition(b":")
            values[key] = int(value)
        return IoCounters(
            values[b"syscr"], values[b"syscw"], values[b"read_bytes"], values[b"write_bytes"]
        )


_USERS: dict[int, str] = {}


def _user_name(uid: int) -> str:
    """Login name of ``uid``, cached (pwd lookups read /etc/passwd); the number if unknown."""
    if uid not in _USERS:
        try:
            _USERS[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _USERS[uid] = str(uid)
    return _USERS[uid]
