"""What the kernel says of memory and pressure, as the snapshots carry it (no I/O here), and
the arithmetic of the time left that collectors and rules share.

The readers are ``collectors/pressure.py`` (PSI), ``collectors/memcg.py`` (a rank's memory
cgroup) and ``collectors/unique_memory.py`` (each process's USS and PSS); the types live apart
from them so that ``collectors/snapshot.py`` holds them without importing any reader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pressure:
    """One resource's stall shares (0..1 of wall time) over the last interval: ``some`` (at
    least one task waited for it), ``full`` (all non-idle tasks did; None where the kernel has
    no such line, the host's CPU before 5.13), and the kernel's own 10 s average of ``some``."""

    some: float | None
    full: float | None
    some_avg10: float | None = None


@dataclass(frozen=True, slots=True)
class PressureSet:
    """PSI for the three resources, of the host or of one cgroup v2 group; a resource the
    kernel does not report is None."""

    cpu: Pressure | None
    memory: Pressure | None
    io: Pressure | None


@dataclass(frozen=True, slots=True)
class CgroupMemory:
    """A rank's memory cgroup as last read: the limit that binds it and the kernel's counters.
    Sizes in bytes; ``None`` where the kernel keeps no such figure (or no limit is set)."""

    cgroup: str  # the rank's own cgroup, as /proc/PID/cgroup names it
    version: int
    limit_bytes: int | None  # the least limit from the rank's cgroup up; None: none set
    usage_bytes: int | None  # the charge of the cgroup that sets the limit (the rank's own else)
    # Of that charge, the memory the kernel cannot drop (anonymous and shared: only swap or
    # the OOM killer frees it); the page cache it reclaims at the limit is left out
    anon_bytes: int | None
    peak_bytes: int | None
    limit_hits: int | None  # v1 failcnt, v2 memory.events "max": charges that met the limit
    oom_events: int | None  # v2 memory.events "oom": the OOM killer invoked for the group
    oom_kills: int | None  # processes of the rank's own cgroup the OOM killer killed
    growth_bytes_per_s: float | None = None  # the anonymous memory's trend (least squares)
    pressure: Pressure | None = None  # v2 memory.pressure of the group that sets the limit

    @property
    def headroom_bytes(self) -> int | None:
        """What the anonymous memory may still grow before the limit (None: no limit)."""
        if self.limit_bytes is None or self.anon_bytes is None:
            return None
        return max(0, self.limit_bytes - self.anon_bytes)


@dataclass(frozen=True, slots=True)
class UniqueMemory:
    """One process's own memory as last read: USS (only it maps: what its exit frees), PSS (its
    share of every page it maps), swapped out; the USS trend over the last minute; age."""

    pid: int
    uss_bytes: int
    pss_bytes: int
    swap_bytes: int
    growth_bytes_per_s: float | None
    age_s: float
    # How long the process has run: a forked DataLoader worker started owning next to nothing,
    # so its USS over its age is its growth until a trend can be drawn
    process_age_s: float | None = None


@dataclass(frozen=True, slots=True)
class JobMemory:
    """A rank's memory: its cgroup's limit and counters, and, while memory is a concern (near
    its limit or growing toward it), the unique memory of the rank and of each DataLoader worker
    (the rank's first)."""

    cgroup: CgroupMemory | None
    processes: tuple[UniqueMemory, ...] = ()
    concern: bool = False  # memory is a concern: the unique memory is being read


def time_left_s(headroom: int | None, growth: float | None) -> float | None:
    """Seconds until ``headroom`` is used at ``growth`` bytes/s (None: not growing, or unknown)."""
    if headroom is None or growth is None or growth <= 0 or not math.isfinite(growth):
        return None
    return headroom / growth
