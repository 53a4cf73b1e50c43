"""What the kernel says of a rank (or a DataLoader worker) that stopped stepping: read first.

Before a stalled rank is asked for its stack, /proc says most of what matters, for a few reads:

* ``T`` stopped (SIGSTOP, job control: ``kill -CONT`` resumes it) or ``t`` (a debugger holds
  it): it answers nothing until resumed, so nothing is asked of it;
* ``D`` uninterruptible: the system call it is in (``/proc/PID/task/TID/syscall``), the kernel
  function it sleeps in (``wchan``) and, for a call on a file descriptor, the file
  (``/proc/PID/fd/N``): a dead network mount, a frozen cgroup, a disk that does not answer;
* ``Z`` or no entry: the process (or its training thread) is gone;
* ``R`` with its CPU time rising: working.  A rank that burns a core is *busy*, never *hung*.

Thread-level: the training thread's own ``task/TID`` entry when the probe published its id
(its main thread's otherwise), since a trainer may step on a thread that is not the main one.
``ProcReader`` keeps the previous CPU time of each thread it read, so a second reading gives
the CPU share in between.  Only stalled ranks and their workers are read; never raises.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from typing import TypeGuard

from traintop.collectors.rates import measured
from traintop.collectors.snapshot import ProcState

BUSY_PCT = 50.0  # runnable this share of the last interval: working (schedstat.BUSY_SHARE)
MIN_INTERVAL_S = 0.4  # CPU times this far apart at least, for a share worth the name
GONE = "X"  # the state of a process (or thread) /proc no longer lists
STATE_WORDS = {
    "R": "running", "S": "sleeping", "D": "uninterruptible", "T": "stopped", "t": "traced",
    "Z": "zombie", "X": "gone", "I": "idle", "P": "parked", "W": "paging",
}  # fmt: skip
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")

# System call numbers worth naming (a blocked call), per machine (asm/unistd*.h); the value is
# the argument that holds the file descriptor the call is on, or None.
_X86_64 = {
    0: ("read", 0), 1: ("write", 0), 2: ("open", None), 3: ("close", 0), 4: ("stat", None),
    5: ("fstat", 0), 7: ("poll", None), 8: ("lseek", 0), 16: ("ioctl", 0), 17: ("pread64", 0),
    18: ("pwrite64", 0), 19: ("readv", 0), 20: ("writev", 0), 23: ("select", None),
    26: ("msync", None), 34: ("pause", None), 35: ("nanosleep", None), 40: ("sendfile", 1),
    42: ("connect", 0), 43: ("accept", 0), 44: ("sendto", 0), 45: ("recvfrom", 0),
    46: ("sendmsg", 0), 47: ("recvmsg", 0), 61: ("wait4", None), 72: ("fcntl", 0),
    73: ("flock", 0), 74: ("fsync", 0), 75: ("fdatasync", 0), 130: ("rt_sigsuspend", None),
    162: ("sync", None), 202: ("futex", None), 217: ("getdents64", 0),
    230: ("clock_nanosleep", None), 232: ("epoll_wait", 0), 247: ("waitid", None),
    257: ("openat", None), 262: ("newfstatat", None), 270: ("pselect6", None),
    271: ("ppoll", None), 275: ("splice", 0), 277: ("sync_file_range", 0),
    281: ("epoll_pwait", 0), 288: ("accept4", 0), 295: ("preadv", 0), 296: ("pwritev", 0),
    299: ("recvmmsg", 0), 306: ("syncfs", 0), 307: ("sendmmsg", 0), 326: ("copy_file_range", 0),
    327: ("preadv2", 0), 328: ("pwritev2", 0), 332: ("statx", None), 426: ("io_uring_enter", 0),
    441: ("epoll_pwait2", 0),
}  # fmt: skip
_GENERIC = {  # aarch64, riscv64 (asm-generic/unistd.h)
    22: ("epoll_pwait", 0), 25: ("fcntl", 0), 29: ("ioctl", 0), 32: ("flock", 0),
    56: ("openat", None), 57: ("close", 0), 61: ("getdents64", 0), 62: ("lseek", 0),
    63: ("read", 0), 64: ("write", 0), 65: ("readv", 0), 66: ("writev", 0), 67: ("pread64", 0),
    68: ("pwrite64", 0), 69: ("preadv", 0), 70: ("pwritev", 0), 71: ("sendfile", 1),
    72: ("pselect6", None), 73: ("ppoll", None), 76: ("splice", 0), 79: ("newfstatat", None),
    80: ("fstat", 0), 81: ("sync", None), 82: ("fsync", 0), 83: ("fdatasync", 0),
    84: ("sync_file_range", 0), 95: ("waitid", None), 98: ("futex", None),
    101: ("nanosleep", None), 115: ("clock_nanosleep", None), 133: ("rt_sigsuspend", None),
    202: ("accept", 0), 203: ("connect", 0), 206: ("sendto", 0), 207: ("recvfrom", 0),
    211: ("sendmsg", 0), 212: ("recvmsg", 0), 227: ("msync", None), 242: ("accept4", 0),
    243: ("recvmmsg", 0), 260: ("wait4", None), 267: ("syncfs", 0), 269: ("sendmmsg", 0),
    285: ("copy_file_range", 0), 286: ("preadv2", 0), 287: ("pwritev2", 0),
    291: ("statx", None), 426: ("io_uring_enter", 0), 441: ("epoll_pwait2", 0),
}  # fmt: skip
SYSCALLS = {"x86_64": _X86_64, "amd64": _X86_64, "aarch64": _GENERIC, "arm64": _GENERIC,
            "riscv64": _GENERIC}.get(platform.machine().lower(), {})  # fmt: skip


def stopped(proc: ProcState | None) -> TypeGuard[ProcState]:
    """Stopped by a signal or held by a debugger: it runs nothing until resumed."""
    return proc is not None and proc.state in ("T", "t")


def dead(proc: ProcState | None) -> TypeGuard[ProcState]:
    """Gone, or a zombie: its training is over whatever its segment says."""
    return proc is not None and proc.state in ("Z", GONE)


def busy(proc: ProcState | None) -> TypeGuard[ProcState]:
    """Working: over the last interval it ran, or waited on a run queue to run, at least
    ``BUSY_PCT`` of the time (on a crowded box a working thread gets less than it wants, and
    its CPU share alone would call it idle); its CPU share where the kernel keeps no
    schedstat."""
    if proc is None:
        return False
    share = proc.runnable_pct if proc.runnable_pct is not None else proc.cpu_pct
    return share is not None and share >= BUSY_PCT


def blocked(proc: ProcState | None) -> TypeGuard[ProcState]:
    """In uninterruptible sleep: no signal reaches it until the kernel lets go."""
    return proc is not None and proc.state == "D"


class ProcReader:
    """Reads ``/proc`` for the threads it is asked about, keeping each one's last CPU time."""

    def __init__(self, proc: str = "/proc", clock: Callable[[], float] = time.monotonic) -> None:
        self._proc = proc
        self._clock = clock
        # (pid, tid): (CPU s, CPU or run-queue s, when read, the shares computed then)
        self._last: dict[tuple[int, int], tuple[float, float, float, tuple]] = {}

    def read(self, pid: int, tid: int = 0) -> ProcState:
        """Thread ``tid`` of ``pid`` (its main thread when 0); ``GONE`` when it is not listed
        (a training thread that ended is gone, even while other threads keep the process)."""
        tid = tid if tid > 0 else pid
        task = f"{self._proc}/{pid}/task/{tid}"
        stat = _stat(task)
        if stat is None:
            self._last.pop((pid, tid), None)
            return ProcState(GONE)
        state, cpu_s = stat
        ran = _schedstat(task)
        cpu_pct, runnable = self._shares((pid, tid), *(ran if ran else (cpu_s, None)))
        if state not in ("D", "S", "T", "t"):
            return ProcState(state, cpu_s, cpu_pct, runnable_pct=runnable)
        name, fd = _syscall(task)
        return ProcState(state, cpu_s, cpu_pct, _wchan(task), name, self._file(pid, fd),
                         runnable)  # fmt: skip

    def _shares(self, key: tuple[int, int], cpu_s: float, wanted_s: float | None) -> tuple:
        """(CPU share, runnable share) since the reading kept for ``key``; a reading is kept
        only ``MIN_INTERVAL_S`` after the one before, and one sooner gives the shares last
        computed."""
        now = self._clock()
        wanted = cpu_s if wanted_s is None else wanted_s
        last = self._last.get(key)
        if last is not None and now - last[2] < MIN_INTERVAL_S:
            return last[3]
        shares: tuple = (None, None)
        if last is not None:
            wall = now - last[2]
            runnable = _pct(wanted - last[1], wall) if wanted_s is not None else None
            shares = (_pct(cpu_s - last[0], wall), runnable)
        self._last[key] = (cpu_s, wanted, now, shares)
        return shares

    def _file(self, pid: int, fd: int | None) -> str | None:
        if fd is None:
            return None
        try:
            return os.readlink(f"{self._proc}/{pid}/fd/{fd}")
        except OSError:
            return None

    def forget(self, keep: set[int]) -> None:
        """Drop the CPU times of processes not in ``keep`` (they stepped again, or ended)."""
        for key in [k for k in self._last if k[0] not in keep]:
            del self._last[key]


def _pct(cpu_s: float, wall_s: float) -> float | None:
    if wall_s <= 0:
        return None
    return measured(max(0.0, 100.0 * cpu_s / wall_s))


def _stat(task: str) -> tuple[str, float] | None:
    """(state letter, CPU seconds) from ``task/stat``; None when the thread is gone."""
    try:
        with open(f"{task}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:
        return fields[0].decode(), (int(fields[11]) + int(fields[12])) * _TICK_S
    except (IndexError, ValueError):
        return None


def _schedstat(task: str) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds on a CPU or waiting on a run queue) from ``task/schedstat``
    (ns precise, where the clock-tick CPU time is 10 ms coarse); None where the kernel keeps
    none."""
    try:
        with open(f"{task}/schedstat", "rb") as f:
            ran, waited = (int(v) for v in f.read().split()[:2])
    except (OSError, ValueError):
        return None
    return ran / 1e9, (ran + waited) / 1e9


def _wchan(task: str) -> str | None:
    """The kernel function the thread sleeps in ("0" or unreadable: none)."""
    try:
        with open(f"{task}/wchan") as f:
            text = f.read().strip()
    except OSError:
        return None
    return text if text and text != "0" else None


def _syscall(task: str) -> tuple[str | None, int | None]:
    """The system call the thread is blocked in and the file descriptor it is on: from
    ``task/syscall`` ("NR arg1 ... arg6 sp pc"; "running"; "-1 sp pc" outside any call)."""
    try:
        with open(f"{task}/syscall") as f:
            words = f.read().split()
    except OSError:  # another user's process, or ptrace access refused
        return None, None
    if len(words) < 7 or not words[0].isdigit():
        return None, None
    number = int(words[0])
    name, fd_arg = SYSCALLS.get(number, (f"syscall {number}", None))
    if fd_arg is None:
        return name, None
    fd = int(words[1 + fd_arg], 16)
    return name, fd if 0 <= fd < 1 << 31 else None


def children(pid: int, proc: str = "/proc") -> list[int]:
    """The processes whose parent is ``pid``, oldest first (a DataLoader starts its workers in
    order, so their order is their worker index): one pass over ``/proc/*/stat``."""
    found = []
    try:
        entries = os.listdir(proc)
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append((int(fields[19]), int(entry)))
        except (OSError, IndexError, ValueError):
            continue
    return [child for _start, child in sorted(found)]


def describe(proc: ProcState) -> str:
    """ "D in read on /data/shard-3.tar (wchan nfs_wait_bit_killable)", "R (98 % CPU)"."""
    parts = [proc.state]
    if proc.syscall:
        parts.append(f"in {proc.syscall}" + (f" on {proc.file}" if proc.file else ""))
    if proc.wchan and proc.state == "D":
        parts.append(f"(wchan {proc.wchan})")
    if proc.cpu_pct is not None and proc.state in ("R", "D", "S"):
        parts.append(f"({proc.cpu_pct:.0f} % CPU)")
    return " ".join(parts)
