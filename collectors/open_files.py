"""/proc files kept open across ticks and re-read in place: one ``pread`` instead of three calls.

A schedstat line is tiny; opening, reading and closing it cost three system calls, two of them
path walks and file setup.  procfs regenerates a seq_file from scratch when it is read at offset
0, so an open descriptor read with ``pread(fd, n, 0)`` gives fresh figures every tick.  A
descriptor pins the task it was opened for, never the pid number: once that thread exits, reads
fail with ESRCH, so a recycled pid can never be read through an old descriptor.  Files not read
during a tick are closed at its end, and at most ``limit`` are held (beyond it, plain reads).
"""

from __future__ import annotations

import os

from traintop.collectors import procfs

READ_BYTES = 256  # a schedstat line is three numbers


class OpenFiles(procfs.KeptDescriptors[str]):
    """Open descriptors by path; :meth:`end_tick` closes those not read since the last call."""

    def __init__(self, limit: int | None = None) -> None:
        super().__init__()
        # A quarter of the soft descriptor limit, at most 512.
        self._limit = procfs.default_limit(4, cap=512) if limit is None else limit
        self._read: set[str] = set()

    def read(self, path: str, pid: int) -> bytes:
        """The file's current content; a vanished task raises ``procfs.NoSuchProcess``."""
        fd = self._fds.get(path)
        if fd is None:
            if len(self._fds) >= self._limit:
                return procfs.read_proc_file(path, pid)
            fd = self._open(path, pid)
        self._read.add(path)
        try:
            data = os.pread(fd, READ_BYTES, 0)
        except OSError as exc:  # ESRCH: the task is gone
            self._close(path)
            raise procfs.NoSuchProcess(pid) from exc
        if not data:
            self._close(path)
            raise procfs.NoSuchProcess(pid)
        return data

    def _open(self, path: str, pid: int) -> int:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, ProcessLookupError) as exc:
            raise procfs.NoSuchProcess(pid) from exc
        except PermissionError as exc:
            raise procfs.AccessDenied(pid) from exc
        self._fds[path] = fd
        return fd

    def end_tick(self) -> None:
        """Close every file not read during this tick (its thread is gone or no longer shown)."""
        for path in [p for p in self._fds if p not in self._read]:
            self._close(path)
        self._read.clear()
