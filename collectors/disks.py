"""Block devices: iostat-style throughput, IOPS, busy % and await per physical disk.

Only whole disks are shown: partitions double-count their disk, and loop/ram/zram/device-mapper
devices double-count (dm, loop over a file) or are not disks at all (ram, zram).  Those virtual
devices appear with ``include_virtual=True``; partitions never do.  On Linux the counters come
from ``/proc/diskstats`` kept open (:class:`DiskStats`), one ``pread`` a tick.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import psutil

from traintop.collectors import procfs
from traintop.collectors.rates import counter_delta, measured, rate
from traintop.collectors.snapshot import DiskSnapshot

PROC_DISKSTATS = "/proc/diskstats"
SECTOR = 512
"""/proc/diskstats counts 512-byte sectors whatever the device's own sector size."""

VIRTUAL_PREFIXES = ("loop", "ram", "zram", "dm-")
"""Whole block devices with no hardware behind them, hidden by default."""

_PARTITION = re.compile(
    r"^(?:(?:[shv]|xv)d[a-z]+\d+|(?:nvme\d+n\d+|mmcblk\d+|nbd\d+|loop\d+)p\d+)$"
)
"""Partition names for systems without /sys/block (sda1, vdb2, xvda1, nvme0n1p1, mmcblk0p1)."""


class DiskClassifier:
    """Decides once per device name whether it is a whole disk and whether it is virtual.

    /sys/block lists exactly the whole devices; a ``device`` link inside means real hardware.
    Where /sys/block is missing (macOS, some containers) partition names are recognised by pattern.
    """

    def __init__(self, sys_block: Path = Path("/sys/block")):
        self._sys_block = sys_block
        self._cache: dict[str, tuple[bool, bool]] = {}

    def classify(self, name: str) -> tuple[bool, bool]:
        """``(is_whole_disk, is_virtual)`` for a ``disk_io_counters`` key."""
        if name not in self._cache:
            self._cache[name] = self._probe(name)
        return self._cache[name]

    def _probe(self, name: str) -> tuple[bool, bool]:
        """Look the device up in sysfs; fall back to its name."""
        named_virtual = name.startswith(VIRTUAL_PREFIXES)
        if not self._sys_block.is_dir():
            return _PARTITION.match(name) is None, named_virtual
        entry = self._sys_block / name.replace("/", "!")
        if not entry.exists():
            return False, named_virtual
        return True, named_virtual or not (entry / "device").exists()


class DiskCollector:
    """Per-disk rates from ``psutil.disk_io_counters(perdisk=True)`` deltas."""

    def __init__(
        self,
        ps: ModuleType | Any = psutil,
        clock: Callable[[], float] = time.monotonic,
        include_virtual: bool = False,
        classifier: DiskClassifier | None = None,
    ):
        self._ps = ps
        self._clock = clock
        linux = ps is psutil and os.path.exists(PROC_DISKSTATS)
        self._diskstats = DiskStats() if linux else None
        self._include_virtual = include_virtual
        self._classifier = classifier or DiskClassifier()
        self._prev: Mapping[str, Any] = {}
        self._prev_t: float | None = None

    def collect(self) -> tuple[DiskSnapshot, ...]:
        """One row per shown disk, sorted by name; rates are ``None`` for a disk's first tick."""
        now = self._clock()
        counters = self._counters()
        dt = 0.0 if self._prev_t is None else now - self._prev_t
        rows = tuple(
            _disk_row(name, self._prev.get(name), cur, dt)
            for name, cur in sorted(counters.items())
            if self._shown(name)
        )
        self._prev, self._prev_t = counters, now
        return rows

    def _counters(self) -> Mapping[str, Any]:
        """Every device's counters: one read of /proc/diskstats, or psutil."""
        if self._diskstats is not None:
            return self._diskstats.read()
        return self._ps.disk_io_counters(perdisk=True) or {}

    def _shown(self, name: str) -> bool:
        """Whole disks, and virtual ones only when asked for."""
        whole, virtual = self._classifier.classify(name)
        return whole and (self._include_virtual or not virtual)


class DiskCounters(NamedTuple):
    """psutil's ``sdiskio`` on Linux: counts, bytes, ms."""

    read_count: int
    write_count: int
    read_bytes: int
    write_bytes: int
    read_time: int
    write_time: int
    read_merged_count: int
    write_merged_count: int
    busy_time: int


class DiskStats:
    """``psutil.disk_io_counters(perdisk=True)`` from one read of ``/proc/diskstats``.

    The counters are the kernel's own, where psutil by default adds back what a counter lost
    when it wrapped: ``traintop.collectors.rates`` takes wraps into account itself.  A line of no
    known layout is skipped (psutil raises).
    """

    def __init__(self, path: str = PROC_DISKSTATS) -> None:
        self._file = procfs.KeptFile(path)

    def read(self) -> dict[str, DiskCounters]:
        found = {}
        for line in self._file.read().splitlines():
            fields = line.split()
            counters = _diskstats_counters(fields)
            if counters is not None:
                found[fields[2].decode(errors="replace")] = counters
        return found


def _diskstats_counters(fields: list[bytes]) -> DiskCounters | None:
    """One line's counters, psutil's way: 14 fields (or 18 and 20 on newer kernels) for a
    disk, 7 for a partition on Linux 2.6 (no times).  Linux 2.4's 15-field layout is gone."""
    if len(fields) == 14 or len(fields) >= 18:
        reads, rmerged, rsect, rtime, writes, wmerged, wsect, wtime, _, busy = map(
            int, fields[3:13]
        )
    elif len(fields) == 7:
        reads, rsect, writes, wsect = map(int, fields[3:7])
        rtime = wtime = rmerged = wmerged = busy = 0
    else:
        return None
    return DiskCounters(reads, writes, rsect * SECTOR, wsect * SECTOR, rtime, wtime, rmerged,
                        wmerged, busy)  # fmt: skip


def _disk_row(name: str, prev: Any, cur: Any, dt: float) -> DiskSnapshot:
    """iostat -x columns for one device between two readings."""
    if prev is None or dt <= 0:
        return DiskSnapshot(name, None, None, None, None, None, None)
    return DiskSnapshot(
        name=name,
        read_bytes_per_s=rate(prev.read_bytes, cur.read_bytes, dt),
        write_bytes_per_s=rate(prev.write_bytes, cur.write_bytes, dt),
        read_iops=rate(prev.read_count, cur.read_count, dt),
        write_iops=rate(prev.write_count, cur.write_count, dt),
        busy_pct=_busy_pct(prev, cur, dt),
        await_ms=_await_ms(prev, cur),
    )


def _busy_pct(prev: Any, cur: Any, dt: float) -> float | None:
    """Share of the interval the device had I/O in flight (Linux ``busy_time``, ms)."""
    busy = rate(getattr(prev, "busy_time", None), getattr(cur, "busy_time", None), dt, scale=0.1)
    return None if busy is None else min(100.0, busy)  # ms a second: 10 is 1 %


def _await_ms(prev: Any, cur: Any) -> float | None:
    """Mean ms per completed I/O; ``None`` when none completed (undefined, not zero)."""
    ios = counter_delta(prev.read_count + prev.write_count, cur.read_count + cur.write_count)
    waited = counter_delta(prev.read_time + prev.write_time, cur.read_time + cur.write_time)
    if not ios or waited is None:
        return None
    return measured(waited / ios)
