"""Process trees in tests: every process below some, to end a job's whole tree at the end.

torchrun gives its ranks sessions of their own and a stopped rank ignores SIGTERM, so a test
that started jobs kills every descendant by pid (SIGKILL, then SIGCONT for a stopped one).
"""

from __future__ import annotations

import os
import signal

import psutil


def descendants(pids: set[int]) -> set[int]:
    """``pids`` and every process below them."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    parents[int(entry)] = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, grew = set(pids), True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    return found


def kill_trees(pids: set[int]) -> None:
    """SIGKILL ``pids`` and everything below them (SIGCONT too: a stopped process dies then)."""
    for pid in descendants(pids):
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except OSError:
                continue


def ended(pid: int) -> bool:
    """Dead, or a zombie: an orphan is reaped by whoever adopted it, maybe never in a container
    whose pid 1 does not reap, and a zombie holds no lock, file or CPU."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
