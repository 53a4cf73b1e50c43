"""The part of psutil's process API that ``ProcessCollector`` uses, read straight from /proc.

Why not psutil itself: ``process_iter()`` plus ``cpu_times()``, ``ppid()``, ``memory_info()`` and
``num_threads()`` cost psutil several reads of ``/proc/<pid>/stat`` and a pid-reuse check per
process (3.9 ms per tick at 115 processes, 11.5 ms at 412), while all of those numbers sit in
that one file.  Here each process costs one read of ``stat`` per tick (a sleeping kernel thread
one read of its shorter ``schedstat``, see :class:`Procfs`), plus ``io`` for the processes that
ran; name, argv and owner are read once per process by the collector's cache.  The files stay
open between ticks (:class:`PidFiles`): a ``pread`` of a kept descriptor costs half an open,
read and close.  Errors are psutil's own exception types, so the collector treats both sources
alike.  Use ``available()`` to decide: other platforms (and a /proc without stat files) keep
psutil.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import resource
from collections.abc import Set
from typing import Generic, NamedTuple, NoReturn, TypeVar

import psutil

NoSuchProcess = psutil.NoSuchProcess
ZombieProcess = psutil.ZombieProcess
AccessDenied = psutil.AccessDenied

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PROC = "/proc"
KTHREADD_PID = 2
"""The parent of every kernel thread."""
READ_BYTES = 4096
"""One read takes a whole ``stat`` or ``io`` file (a few hundred bytes at most)."""


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


def process_iter(proc_root: str = _PROC) -> list[ProcfsProcess]:
    """Every process whose stat file could be read right now, in pid order of /proc."""
    return Procfs(proc_root).process_iter()


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
    except OSError as exc:
        _reraise(exc, pid)
    return b"".join(chunks)


def _reraise(exc: OSError, pid: int) -> NoReturn:
    """psutil's error for a failed open or read of a process's file: a vanished process
    (ENOENT, ESRCH) is NoSuchProcess, EACCES AccessDenied (io is checked at read time, for
    ptrace access); anything else (EMFILE) is no fault of the process and is raised as is."""
    if isinstance(exc, (FileNotFoundError, ProcessLookupError)):
        raise NoSuchProcess(pid) from exc
    if isinstance(exc, PermissionError):
        raise AccessDenied(pid) from exc
    raise exc


K = TypeVar("K")


def default_limit(share: int, cap: int = 4096) -> int:
    """``1/share`` of the soft descriptor limit, at most ``cap``: the monitor needs the rest."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return cap if soft == resource.RLIM_INFINITY else max(0, min(cap, soft // share))


class KeptDescriptors(Generic[K]):
    """Raw descriptors kept open by key, and closed with their owner: what :class:`PidFiles`
    and ``traintop.collectors.open_files.OpenFiles`` share."""

    def __init__(self) -> None:
        self._fds: dict[K, int] = {}

    def _close(self, key: K) -> None:
        fd = self._fds.pop(key, None)
        if fd is not None:
            os.close(fd)

    def __len__(self) -> int:
        return len(self._fds)

    def close(self) -> None:
        for key in list(self._fds):
            self._close(key)

    def __del__(self) -> None:
        # Raw descriptors are not closed by the garbage collector: a collector that is dropped
        # (a test, `snapshot --json`) must not leave hundreds behind in a long-lived process.
        self.close()


class PidFiles(KeptDescriptors[int]):
    """One file of every process (``/proc/PID/<name>``) kept open and re-read with ``pread``.

    procfs regenerates a file from scratch when it is read at offset 0, so a kept descriptor
    gives fresh figures every tick.  It pins the process it was opened for, never the pid
    number: once that process is reaped, reads fail with ESRCH, and the pid (which a new process
    may hold) is opened afresh.  A file stays open while its process lives, read or not (a
    trainer's ``io`` is read only in the ticks it got CPU time: closing it when it was not
    meant opening it again a tick later); :meth:`retain` closes those of the processes gone.
    Beyond ``limit`` open files, reads are plain open, read and close.
    """

    def __init__(self, proc_root: str, name: str, limit: int) -> None:
        super().__init__()
        self._root, self._name, self._limit = proc_root, name, limit

    def read(self, pid: int) -> bytes:
        """The file's current content; a vanished process raises ``NoSuchProcess``."""
        fd = self._fds.get(pid)
        if fd is not None:
            try:
                return os.pread(fd, READ_BYTES, 0)
            except OSError:
                self._close(pid)  # reaped (ESRCH): the pid, if still listed, names a new process
        return self._read_anew(pid)

    def _read_anew(self, pid: int) -> bytes:
        """Open the file (or read it plainly, at the limit) and read it."""
        if len(self._fds) >= self._limit:
            return read_proc_file(f"{self._root}/{pid}/{self._name}", pid)
        fd = self._open(pid)
        try:
            return os.pread(fd, READ_BYTES, 0)
        except OSError as exc:
            self._close(pid)
            _reraise(exc, pid)

    def _open(self, pid: int) -> int:
        try:
            fd = os.open(f"{self._root}/{pid}/{self._name}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            _reraise(exc, pid)
        self._fds[pid] = fd
        return fd

    def retain(self, pids: Set[int]) -> None:
        """Close the files of the processes not in ``pids`` (the live ones)."""
        for pid in self._fds.keys() - pids:
            self._close(pid)


class KeptFile:
    """One whole system-wide file (``/proc/stat``, ``/proc/meminfo``...) re-read in place.

    ``pread`` at offset 0 of a descriptor kept open makes procfs generate the file afresh, for
    one system call a tick instead of psutil's open, reads and close (and a file object).  The
    whole file is taken in one read, so it is one consistent generation: a buffer that comes
    back full is too small, and the read is done again with four times the size.
    """

    def __init__(self, path: str, size: int = 16384) -> None:
        self.path, self._size = path, size
        self._fd: int | None = None

    def read(self) -> bytes:
        """The file's current content; an error closes it, so the next read opens it again."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            while len(data := os.pread(self._fd, self._size, 0)) == self._size:
                self._size *= 4
        except OSError:
            self.close()
            raise
        return data

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()


class Procfs:
    """The ``ps`` stand-in for ``ProcessCollector``: psutil's exception types and a
    ``process_iter()`` whose processes read ``stat`` and ``io`` through kept files.

    A process whose stat line is byte for byte the one of the last scan comes back as the
    same object: it did not run (its CPU time, faults and last CPU would show it), and the
    collector can reuse what it made of it instead of parsing it again.

    Kernel threads (half the processes of a GPU box, a few per CPU) are not even read unless
    they ran: their ``schedstat`` line (time on a CPU, time queued, timeslices), a third of the
    cost of ``stat``, is compared first.  Nothing else in their stat line moves while they
    sleep: no memory, no threads, kthreadd as parent for life.  It is read before ``stat``, so
    a run between the two reads shows as a change at the next scan.  Where the kernel keeps no
    scheduler statistics (``0 0 0``, or no file at all) every stat line is read.

    Listing /proc (a dentry per process) costs as much as reading a hundred schedstat lines, and
    is needed only to find new processes: the pids of the last scan are read again while the
    newest pid the kernel handed out (``/proc/loadavg``, threads included) is the same.  A
    process that ended since fails its read, as a listed one that ended meanwhile would.
    """

    NoSuchProcess = NoSuchProcess
    ZombieProcess = ZombieProcess
    AccessDenied = AccessDenied

    def __init__(self, proc_root: str = _PROC, limit: int | None = None) -> None:
        self.root = proc_root
        self.stat = PidFiles(proc_root, "stat", default_limit(4) if limit is None else limit)
        self.io = PidFiles(proc_root, "io", default_limit(16) if limit is None else limit)
        self.sched = PidFiles(proc_root, "schedstat", default_limit(8) if limit is None else limit)
        self._has_sched = os.path.exists(f"{proc_root}/self/schedstat")
        self._last: dict[int, ProcfsProcess] = {}
        self._loadavg = KeptFile(f"{proc_root}/loadavg") if _own_pids(proc_root) else None
        self._newest: bytes | None = None
        self._pids: list[int] = []

    def process_iter(self) -> list[ProcfsProcess]:
        """Every process whose stat file could be read, in pid order of /proc.

        First the files of the processes gone by the last scan are closed.
        """
        last, self._last = self._last, {}
        for files in (self.stat, self.sched, self.io):
            files.retain(last.keys())
        self._pids = [pid for pid in self._pids_now() if self._scan(pid, last)]
        return list(self._last.values())

    def _pids_now(self) -> list[int]:
        """Last scan's pids while no task was created since, else those listed in /proc."""
        newest = self._newest_pid()  # before the listing: a task born meanwhile is listed
        if newest is not None and newest == self._newest:
            return self._pids
        listed = [int(entry) for entry in os.listdir(self.root) if entry.isdigit()]
        self._newest = newest  # only once listed: a failed listing is tried again
        return listed

    def _newest_pid(self) -> bytes | None:
        """The last field of ``/proc/loadavg``; ``None`` where it cannot be trusted or read."""
        if self._loadavg is None:
            return None
        try:
            return self._loadavg.read().rsplit(None, 1)[-1]
        except (OSError, IndexError):
            return None

    def _scan(self, pid: int, last: dict[int, ProcfsProcess]) -> bool:
        """Read one process into this scan (last scan's object if it did not change); whether
        it may still exist (not when its files are gone)."""
        proc = last.get(pid)
        try:
            sched = self._sched_line(pid, proc)
            if sched is None or proc is None or sched != proc.sched:
                proc = self._read(pid, proc, sched)
        except NoSuchProcess:
            return False
        except AccessDenied:
            return True
        self._last[pid] = proc
        return True

    def _sched_line(self, pid: int, proc: ProcfsProcess | None) -> bytes | None:
        """The schedstat line of a process last seen as a kernel thread, else ``None``."""
        if proc is None or not proc.is_kernel_thread or not self._has_sched:
            return None
        line = self.sched.read(pid)
        return None if line.startswith(b"0 ") else line  # no statistics kept: useless

    def _read(self, pid: int, proc: ProcfsProcess | None, sched: bytes | None) -> ProcfsProcess:
        """The process from its stat line: ``proc`` again if that line did not change."""
        raw = self.stat.read(pid)
        if proc is None or proc.raw != raw:
            return ProcfsProcess(pid, self.root, self.io, raw, sched)
        proc.sched = sched  # it ran, too briefly to change its stat line: compare from here
        return proc


def _own_pids(proc_root: str) -> bool:
    """Whether ``proc_root`` shows this process's own pid namespace, the one whose newest pid
    ``loadavg`` reports (a /proc of another namespace, bind-mounted, would not)."""
    try:
        return os.readlink(f"{proc_root}/self") == str(os.getpid())
    except OSError:
        return False


_NO_BATCH = contextlib.nullcontext()


class ProcfsProcess:
    """One process, its stat line parsed once at construction (one tick's view of it).

    Every number the collector asks for is taken from the line here, in one pass: the
    collector reads a few hundred of these per tick, so per-call parsing added up.  The name
    and state are decoded only when asked for: most processes are never shown.
    """

    __slots__ = (
        "_comm",
        "_cpu",
        "_create",
        "_io_files",
        "_ppid",
        "_root",
        "_rss_pages",
        "_state",
        "_threads",
        "_vms",
        "is_kernel_thread",
        "pid",
        "raw",
        "sched",
    )

    def __init__(
        self,
        pid: int,
        proc_root: str = _PROC,
        io_files: PidFiles | None = None,
        raw: bytes | None = None,
        sched: bytes | None = None,
    ) -> None:
        """``raw``: the stat line, already read (else it is read here); ``io_files``: where to
        read ``io`` through a kept descriptor (else it is opened for each read); ``sched``: a
        kernel thread's schedstat line read just before ``raw`` (see ``Procfs``)."""
        self.pid, self._root, self._io_files, self.sched = pid, proc_root, io_files, sched
        self.raw = read_proc_file(f"{proc_root}/{pid}/stat", pid) if raw is None else raw
        try:
            self._parse(self.raw)
        except (ValueError, IndexError) as exc:  # not a stat line: nothing to show for it
            raise NoSuchProcess(pid) from exc

    def _parse(self, raw: bytes) -> None:
        # comm sits in parentheses and may itself contain ") ", so split at the last one.
        end = raw.rindex(b")")
        self._comm = raw[raw.index(b"(") + 1 : end]
        # stat(5) fields 3 (state) .. 24 (rss).
        fields = raw[end + 1 :].split(None, 22)
        self._state = fields[0]
        self._ppid = int(fields[1])
        self._cpu = (int(fields[11]), int(fields[12]))
        self._threads = int(fields[17])
        self._create = int(fields[19])
        self._vms, self._rss_pages = int(fields[20]), int(fields[21])
        # kthreadd and its children: no memory and no file I/O of their own
        self.is_kernel_thread = self._ppid == KTHREADD_PID or self.pid == KTHREADD_PID

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
        return self._state.decode(errors="replace")

    def cpu_times(self) -> CpuTimes:
        return CpuTimes(self._cpu[0] / _CLK_TCK, self._cpu[1] / _CLK_TCK)

    def memory_info(self) -> MemoryInfo:
        return MemoryInfo(self._rss_pages * _PAGE, self._vms)

    def num_threads(self) -> int:
        return self._threads

    def name(self) -> str:
        return self._comm.decode(errors="replace")

    def cmdline(self) -> list[str]:
        raw = read_proc_file(f"{self._root}/{self.pid}/cmdline", self.pid)
        return [arg.decode(errors="replace") for arg in raw.rstrip(b"\0").split(b"\0") if arg]

    def username(self) -> str:
        try:
            uid = os.stat(f"{self._root}/{self.pid}").st_uid
        except FileNotFoundError as exc:
            raise NoSuchProcess(self.pid) from exc
        return _user_name(uid)

    def io_counters(self) -> IoCounters:
        if self.is_kernel_thread:
            return _NO_IO  # kernel threads do no file I/O of their own: skip one read each
        if self._io_files is None:
            raw = read_proc_file(f"{self._root}/{self.pid}/io", self.pid)
        else:
            raw = self._io_files.read(self.pid)
        words = raw.split()
        values = dict(zip(words[::2], words[1::2], strict=False))
        return IoCounters(
            int(values[b"syscr:"]),
            int(values[b"syscw:"]),
            int(values[b"read_bytes:"]),
            int(values[b"write_bytes:"]),
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
