"""Host RAM and swap, with swap-in/out rates.

Swap *use* alone is misleading on training boxes (pages swapped out hours ago and never touched);
the sin/sout rates show whether the machine is swapping right now, which stalls DataLoaders.
On Linux the figures come from ``/proc/meminfo`` and ``/proc/vmstat`` kept open
(:class:`MemInfo`), read once each, where psutil opens and parses meminfo twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

import psutil

from traintop.collectors import procfs
from traintop.collectors.rates import rate
from traintop.collectors.snapshot import MemorySnapshot
from traintop.collectors.trend import History

PROC_MEMINFO = "/proc/meminfo"
PROC_VMSTAT = "/proc/vmstat"
SWAP_PAGE = 4096
"""psutil counts ``pswpin``/``pswpout`` in 4 KiB pages whatever the page size; so do we."""


class VirtualMemory(NamedTuple):
    """The ``psutil.virtual_memory()`` fields the collector shows, as psutil computes them."""

    total: int
    available: int
    used: int
    cached: int


class SwapMemory(NamedTuple):
    """The ``psutil.swap_memory()`` fields the collector shows, and the kernel's OOM kills
    (``/proc/vmstat`` ``oom_kill``, read with the swap counters; None where absent)."""

    total: int
    used: int
    sin: int
    sout: int
    oom_kills: int | None = None


class MemoryCollector:
    """Samples ``virtual_memory`` and ``swap_memory``; swap rates are ``None`` on the first tick."""

    def __init__(self, ps: ModuleType | Any = psutil, clock: Callable[[], float] = time.monotonic):
        self._ps = ps
        self._clock = clock
        self._prev: tuple[float, int, int] | None = None
        linux = ps is psutil and os.path.exists(PROC_MEMINFO) and os.path.exists(PROC_VMSTAT)
        self._meminfo = MemInfo() if linux else None
        self._available = History()  # its trend: memory being used up (collectors/memcg.py)

    def collect(self) -> MemorySnapshot:
        """One reading of RAM and swap."""
        now = self._clock()
        vm, swap = self._read()
        sin_rate, sout_rate = self._swap_rates(now, swap.sin, swap.sout)
        trend = self._available.add(now, float(vm.available))
        return MemorySnapshot(
            total_bytes=vm.total,
            used_bytes=vm.used,
            available_bytes=vm.available,
            cached_bytes=getattr(vm, "cached", None),
            swap_total_bytes=swap.total,
            swap_used_bytes=swap.used,
            swap_in_bytes_per_s=sin_rate,
            swap_out_bytes_per_s=sout_rate,
            oom_kills=getattr(swap, "oom_kills", None),
            available_trend_bytes_per_s=trend,
        )

    def _read(self) -> tuple[Any, Any]:
        """``(virtual, swap)`` from the kept files, or psutil where those lack a figure."""
        found = self._meminfo.read() if self._meminfo is not None else None
        return found or (self._ps.virtual_memory(), self._ps.swap_memory())

    def _swap_rates(self, now: float, sin: int, sout: int) -> tuple[float | None, float | None]:
        """Bytes/s swapped in and out since the previous tick."""
        prev, self._prev = self._prev, (now, sin, sout)
        if prev is None:
            return None, None
        dt = now - prev[0]
        return rate(prev[1], sin, dt), rate(prev[2], sout, dt)


class MemInfo:
    """psutil's RAM and swap figures from one read each of ``/proc/meminfo`` and ``/proc/vmstat``.

    Only what the kernel states outright is taken: without ``MemAvailable`` (kernels before
    3.14, or 0 by a kernel bug) psutil estimates it from ``/proc/zoneinfo``, and without the
    swap lines it asks ``sysinfo(2)``; :meth:`read` then answers ``None`` and psutil is used.
    """

    def __init__(self, meminfo: str = PROC_MEMINFO, vmstat: str = PROC_VMSTAT) -> None:
        self._meminfo = procfs.KeptFile(meminfo)
        self._vmstat = procfs.KeptFile(vmstat)

    def read(self) -> tuple[VirtualMemory, SwapMemory] | None:
        """psutil's figures, or ``None`` where psutil would have to estimate one."""
        text = b"\n" + self._meminfo.read()
        stated = [_kib(text, key) for key in _STATED]
        known = [value for value in stated if value is not None]
        if len(known) < len(stated) or not known[2]:
            return None
        total, free, available, swap_total, swap_free = known
        vm = VirtualMemory(total, *_available_used(total, free, available), _cached(text))
        vmstat = b"\n" + self._vmstat.read()
        sin, sout = (_count(vmstat, key) * SWAP_PAGE for key in (b"pswpin", b"pswpout"))
        kills = _value(vmstat, b"oom_kill ")
        return vm, SwapMemory(swap_total, swap_total - swap_free, sin, sout, kills)


_STATED = (b"MemTotal", b"MemFree", b"MemAvailable", b"SwapTotal", b"SwapFree")


def _available_used(total: int, free: int, available: int) -> tuple[int, int]:
    """psutil's rule: an ``available`` above ``total`` is a container's distorted view (LXC);
    ``free`` is shown instead, as procps does."""
    if available > total:
        available = free
    return available, total - available


def _cached(text: bytes) -> int:
    """Page cache as ``free`` shows it (and psutil): ``Cached`` plus reclaimable slab."""
    cached = _kib(text, b"Cached")
    return 0 if cached is None else cached + (_kib(text, b"SReclaimable") or 0)


def _kib(text: bytes, key: bytes) -> int | None:
    """Bytes of one ``/proc/meminfo`` line (``"\\nKey:   123 kB"``); ``None`` if it is absent."""
    value = _value(text, key + b":")
    return None if value is None else value * 1024


def _count(text: bytes, key: bytes) -> int:
    """One ``/proc/vmstat`` counter (``"\\nkey 123"``); 0 if absent, as psutil."""
    return _value(text, key + b" ") or 0


def _value(text: bytes, key: bytes) -> int | None:
    """The number after ``key`` at the start of a line of ``text`` (which starts with a newline)."""
    start = text.find(b"\n" + key)
    if start < 0:
        return None
    start += len(key) + 1
    end = text.find(b"\n", start)
    return int(text[start : end if end >= 0 else None].split()[0])
