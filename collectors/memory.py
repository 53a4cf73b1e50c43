"""Host RAM and swap, with swap-in/out rates.

Swap *use* alone is misleading on training boxes (pages swapped out hours ago and never touched);
the sin/sout rates show whether the machine is swapping right now, which stalls DataLoaders.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import psutil

from collectors.rates import rate
from collectors.snapshot import MemorySnapshot


class MemoryCollector:
    """Samples ``virtual_memory`` and ``swap_memory``; swap rates are ``None`` on the first tick."""

    def __init__(self, ps: ModuleType | Any = psutil, clock: Callable[[], float] = time.monotonic):
        self._ps = ps
        self._clock = clock
        self._prev: tuple[float, int, int] | None = None

    def collect(self) -> MemorySnapshot:
        """One reading of RAM and swap."""
        now = self._clock()
        vm = self._ps.virtual_memory()
        swap = self._ps.swap_memory()
        sin_rate, sout_rate = self._swap_rates(now, swap.sin, swap.sout)
        return MemorySnapshot(
            total_bytes=vm.total,
            used_bytes=vm.used,
            available_bytes=vm.available,
            cached_bytes=getattr(vm, "cached", None),
            swap_total_bytes=swap.total,
            swap_used_bytes=swap.used,
            swap_in_bytes_per_s=sin_rate,
            swap_out_bytes_per_s=sout_rate,
        )

    def _swap_rates(self, now: float, sin: int, sout: int) -> tuple[float | None, float | None]:
        """Bytes/s swapped in and out since the previous tick."""
        prev, self._prev = self._prev, (now, sin, sout)
        if prev is None:
            return None, None
        dt = now - prev[0]
        return rate(prev[1], sin, dt), rate(prev[2], sout, dt)
