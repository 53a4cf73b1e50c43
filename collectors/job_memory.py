"""Each live rank's memory: its cgroup, its own PSI, and while memory is a concern the unique
memory of the rank and its DataLoader workers (docs/diagnosis.md, "Host memory").

Cheap figures are read for every live rank: its memory cgroup every 2 s (collectors/memcg.py)
and, where it sits in a cgroup v2 group of its own, that group's pressure files.  The costly
one (each process's unique memory, collectors/unique_memory.py) only once memory is a
*concern* for the rank: its cgroup's anonymous memory at ``CONCERN_SHARE`` of its limit or,
at the current growth, ``CONCERN_S`` from it; or the host's RAM ``HOST_CONCERN_SHARE`` used
or, at its trend, ``CONCERN_S`` from running out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from traintop.collectors.cgroup import V2, CgroupReader
from traintop.collectors.memcg import MemcgReader
from traintop.collectors.memory import MemInfo
from traintop.collectors.memory_state import CgroupMemory, JobMemory, PressureSet, time_left_s
from traintop.collectors.oom_witness import OomWitness
from traintop.collectors.pressure import RESOURCES, PressureFile
from traintop.collectors.trend import History
from traintop.collectors.unique_memory import UniqueMemoryReader

CONCERN_SHARE = 0.5  # of its cgroup's limit in use
HOST_CONCERN_SHARE = 0.8  # of the host's RAM no longer available
CONCERN_S = 3600.0  # the limit reached within this long at the current growth
HOST_EVERY_S = 2.0
FORGET_S = 60.0


class HostMemory:
    """The host's RAM every ``HOST_EVERY_S``: ``(used, total)`` and the trend of what is used."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._info = MemInfo()
        self._history = History()
        self._at = -1e18
        self.used: tuple[int, int] | None = None  # (used, total) bytes
        self.growth: float | None = None

    def read(self) -> tuple[int, int] | None:
        now = self._clock()
        if now - self._at >= HOST_EVERY_S:
            self._at = now
            try:
                found = self._info.read()
            except (OSError, ValueError):
                found = None
            if found is not None:
                vm = found[0]
                self.used = (vm.total - vm.available, vm.total)
                self.growth = self._history.add(now, float(self.used[0]))
        return self.used

    def concern(self) -> bool:
        if self.used is None:
            return False
        used, total = self.used
        left = time_left_s(total - used, self.growth)
        return used >= HOST_CONCERN_SHARE * total or (left is not None and left <= CONCERN_S)


class JobMemoryReader:
    """What ``JobCollector`` asks about each live rank's memory, and the witness of its end."""

    def __init__(self, cgroups: CgroupReader, clock: Callable[[], float] = time.monotonic,
                 proc: str = "/proc") -> None:  # fmt: skip
        self._cgroups = cgroups
        self.memcg = MemcgReader(cgroups, clock)
        self.unique = UniqueMemoryReader(proc, clock)
        self.host = HostMemory(clock)
        self.witness = OomWitness(self.memcg, clock, meminfo=self.host.read)
        self._pressure: dict[str, PressureFile] = {}
        self._clock = clock

    def read(self, pid: int, workers: Sequence[int]) -> JobMemory | None:
        """The rank's memory now (None: no memory cgroup readable and no concern)."""
        cgroup = self.memcg.read(pid)
        self.witness.alive(pid, cgroup)
        concern = _concern(cgroup) or self.host.concern()
        processes = self.unique.read((pid, *workers)) if concern else ()
        if cgroup is None and not processes:
            return None
        return JobMemory(cgroup, processes, concern)

    def pressure(self, pid: int) -> PressureSet | None:
        """The PSI of the rank's own cgroup v2 group (None under v1, or in the root group,
        whose pressure is the host's)."""
        paths = self._cgroups.paths(pid, self._clock())
        found = self._cgroups.folder(paths, V2) if paths else None
        if found is None or found[2] in ("", "/"):
            return None
        now = self._clock()
        read = [self._file(found[1], r).read(now) for r in RESOURCES]
        return PressureSet(*read) if any(p is not None for p in read) else None

    def _file(self, folder: Path, resource: str) -> PressureFile:
        path = str(folder / f"{resource}.pressure")
        if path not in self._pressure:
            self._pressure[path] = PressureFile(path)
        return self._pressure[path]

    def forget(self, alive: set[int]) -> None:
        """Drop what is kept of processes no longer live, and pressure files unread for long."""
        self.memcg.forget(alive)
        self.witness.forget(alive)
        now = self._clock()
        for path in [p for p, f in self._pressure.items() if now - f.read_at > FORGET_S]:
            self._pressure.pop(path).close()


def _concern(cgroup: CgroupMemory | None) -> bool:
    """The rank's cgroup is half full or, at its growth, an hour from its limit."""
    if cgroup is None or cgroup.limit_bytes is None or cgroup.anon_bytes is None:
        return False
    if cgroup.anon_bytes >= CONCERN_SHARE * cgroup.limit_bytes:
        return True
    left = time_left_s(cgroup.headroom_bytes, cgroup.growth_bytes_per_s)
    return left is not None and left <= CONCERN_S
