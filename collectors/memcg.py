"""The memory a job may use by its cgroup, how close it is to it, and the kernel's OOM counters.

A container's memory limit (``docker --memory``, a Kubernetes ``limits.memory``, Slurm's
``--mem``) is a memory cgroup's: when the group's charge reaches it the kernel reclaims page
cache, then invokes the OOM killer *inside the group*, whatever the host has free.  The group
counts both: how often the limit was hit and how many of its processes the OOM killer took.

* v1 (``/sys/fs/cgroup/memory``): ``memory.limit_in_bytes`` (a parent's binds its children:
  the least up to the root counts), ``memory.usage_in_bytes``, ``memory.max_usage_in_bytes``,
  ``memory.failcnt`` (charges that hit the limit), ``memory.stat``'s ``total_inactive_file``,
  and ``memory.oom_control``'s ``oom_kill`` (Linux 4.13: kills of the group's own processes,
  counted in the victim's group only).
* v2: ``memory.max``, ``memory.current``, ``memory.peak``, ``memory.stat``'s ``inactive_file``,
  ``memory.events`` (``max``: the limit hit; ``oom``: the OOM killer invoked for the group;
  ``oom_kill``: processes killed, counted up the tree) and ``memory.pressure`` (PSI).

What the kernel cannot reclaim is the group's anonymous and shared memory (``memory.stat``:
v1 ``total_rss + total_shmem``, v2 ``anon + shmem``): the page cache is dropped at the limit
(a group that reads files sits at its limit all the time, healthy), and the OOM killer acts when
the anonymous memory alone no longer fits.  Its growth is the least-squares slope of the newest
readings (collectors/trend.py), so a steady climb gives the time left at the current growth.
A group is read every ``READ_EVERY_S``, every ``NEAR_EVERY_S`` once half full (a climb to the
limit is then timed within seconds) and for a limited group's first three readings, once for all
the ranks in it: about ten small files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from traintop.collectors.cgroup import V2, CgroupReader, Mount, _inside, _read, _up
from traintop.collectors.memory_state import CgroupMemory
from traintop.collectors.pressure import PressureFile
from traintop.collectors.trend import TREND_POINTS, History

READ_EVERY_S = 2.0
NEAR_EVERY_S = 1.0  # ... every second once its anonymous memory is half its limit: a climb to it
NEAR_SHARE = 0.5
TICK_SLACK_S = 0.15  # the sampler's 1 s ticks come 0.95-1.0 s apart: one a little early is due
UNLIMITED = 1 << 62  # v1 writes "no limit" as a page-rounded 2^63 - 1


def _stat_value(text: str | None, key: str) -> int | None:
    """One ``key value`` line of a flat-keyed file (``memory.stat``, ``memory.events``)."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def limit_at(folder: Path, version: int) -> int | None:
    """One cgroup's own limit in bytes (None: none set there)."""
    text = _read(folder / ("memory.max" if version == 2 else "memory.limit_in_bytes"))
    if text is None or text.strip() == "max":
        return None
    value = _int(text)
    return value if value is not None and 0 < value < UNLIMITED else None


def least_limit(mount: Mount, folder: Path) -> tuple[int | None, Path]:
    """The least limit from ``folder`` up to the root, and the cgroup that sets it (``folder``
    itself when none does)."""
    best: tuple[int | None, Path] = (None, folder)
    for level in _up(folder, mount.path):
        limit = limit_at(level, mount.version)
        if limit is not None and (best[0] is None or limit < best[0]):
            best = (limit, level)
    return best


# Per version: the charge, its peak, and memory.stat's keys of the memory it cannot reclaim
FILES = {
    1: ("memory.usage_in_bytes", "memory.max_usage_in_bytes", ("total_rss", "total_shmem")),
    2: ("memory.current", "memory.peak", ("anon", "shmem")),
}


def read_group(mount: Mount, folder: Path, path: str) -> CgroupMemory:
    """The counters of the rank's cgroup ``folder`` (``path`` as /proc names it) and of the
    cgroup whose limit binds it."""
    limit, binding = least_limit(mount, folder)
    usage_file, peak_file, anon_keys = FILES[mount.version]
    usage = _int(_read(binding / usage_file))
    anon = _sum(_read(binding / "memory.stat"), anon_keys)
    hits, ooms, kills = _events(mount.version, folder, binding)
    peak = _int(_read(binding / peak_file))
    return CgroupMemory(path, mount.version, limit, usage, anon, peak, hits, ooms, kills)


def _events(version: int, own: Path, binding: Path) -> tuple[int | None, ...]:
    """``(limit hits, OOM events, OOM kills)``: v1's failcnt and oom_control (no OOM event
    count), v2's memory.events (the kills of the rank's own group, counted up the tree)."""
    if version == 1:
        kills = _stat_value(_read(own / "memory.oom_control"), "oom_kill")
        return _int(_read(binding / "memory.failcnt")), None, kills
    events = _read(binding / "memory.events")
    own_events = events if own == binding else _read(own / "memory.events")
    return (_stat_value(events, "max"), _stat_value(events, "oom"),
            _stat_value(own_events, "oom_kill"))  # fmt: skip


def _sum(stat: str | None, keys: tuple[str, ...]) -> int | None:
    """The sum of ``keys`` in a ``memory.stat`` text (None: the first is missing)."""
    values = [_stat_value(stat, key) for key in keys]
    return None if values[0] is None else sum(v or 0 for v in values)


@dataclass(slots=True)
class _Group:
    """One cgroup followed: its last reading, when, the working set's history, its PSI file."""

    at: float
    memory: CgroupMemory | None
    history: History
    pressure: PressureFile | None


class MemcgReader:
    """Each rank's :class:`CgroupMemory`, read at most every ``every_s`` per cgroup (the ranks
    of one container share one reading); between reads the last one is returned.  The
    memberships and mounts are the CPU reader's (``CgroupReader``): one ``/proc/PID/cgroup``
    read serves both."""

    def __init__(self, cgroups: CgroupReader, clock: Callable[[], float],
                 every_s: float = READ_EVERY_S) -> None:  # fmt: skip
        self._cgroups = cgroups
        self._clock = clock
        self._every_s = every_s
        self._groups: dict[str, _Group] = {}
        self._last: dict[int, CgroupMemory] = {}  # pid: its last reading while it lived

    def read(self, pid: int) -> CgroupMemory | None:
        """``pid``'s memory cgroup (None: no memory controller to read, or the process gone)."""
        now = self._clock()
        paths = self._cgroups.paths(pid, now)
        found = self._cgroups.folder(paths, "memory") if paths else None
        if found is None:
            return None
        mount, folder, path = found
        group = self._groups.get(path)
        if group is None or now - group.at >= self._due_s(group) - TICK_SLACK_S:
            group = self._reread(group, mount, folder, path, now)
        if group.memory is not None:
            self._last[pid] = group.memory
        return group.memory

    def _due_s(self, group: _Group) -> float:
        """Every ``every_s``; every ``NEAR_EVERY_S`` for a group half full, and for a limited
        group's first readings (until it has a trend's three): its trend then comes within
        two seconds of the monitor's start, in time to be said before the OOM killer acts
        and before a lesser verdict is shown first."""
        memory = group.memory
        limit = memory.limit_bytes if memory is not None else None
        used = memory.anon_bytes if memory is not None else None
        fresh = len(group.history) < TREND_POINTS
        if limit is not None and used is not None and (fresh or used >= NEAR_SHARE * limit):
            return min(self._every_s, NEAR_EVERY_S)
        return self._every_s

    def last(self, pid: int) -> CgroupMemory | None:
        """``pid``'s last reading while it lived: what a witness of its end compares against."""
        return self._last.get(pid)

    def again(self, memory: CgroupMemory) -> CgroupMemory | None:
        """A fresh reading of the cgroup of an earlier one (a rank that just ended: its
        ``/proc/PID/cgroup`` is gone, its group may still be there); None if it is not."""
        mount = self._cgroups.mounts().get("memory") or self._cgroups.mounts().get(V2)
        folder = _inside(mount, memory.cgroup) if mount is not None else None
        if mount is None or folder is None or not folder.is_dir():
            return None
        try:
            return read_group(mount, folder, memory.cgroup)
        except (OSError, ValueError):
            return None

    def limit_of(self, path: str) -> int | None:
        """The limit that binds the memory cgroup ``path`` (as /proc names it), read now; None
        where it is gone or sets none (the kernel log names a victim's group this way)."""
        mount = self._cgroups.mounts().get("memory") or self._cgroups.mounts().get(V2)
        folder = _inside(mount, path) if mount is not None else None
        if mount is None or folder is None or not folder.is_dir():
            return None
        return least_limit(mount, folder)[0]

    def forget(self, alive: set[int]) -> None:
        """Drop the last readings of processes no longer asked about."""
        for pid in [p for p in self._last if p not in alive]:
            del self._last[pid]

    def _reread(self, group: _Group | None, mount: Mount, folder: Path, path: str,
                now: float) -> _Group:  # fmt: skip
        if group is None:
            pressure = PressureFile(str(folder / "memory.pressure")) if mount.version == 2 else None
            group = _Group(now, None, History(), pressure)
            self._groups[path] = group
        group.at = now
        try:
            memory = read_group(mount, folder, path)
        except (OSError, ValueError):
            group.memory = None
            return group
        growth = None
        if memory.anon_bytes is not None:
            growth = group.history.add(now, float(memory.anon_bytes))
        psi = group.pressure.read(now) if group.pressure is not None else None
        group.memory = replace(memory, growth_bytes_per_s=growth, pressure=psi)
        return group
