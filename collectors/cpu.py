"""CPU cores: utilization from ``cpu_times`` deltas, frequency and load average.

``psutil.cpu_percent`` keeps its previous reading per calling thread and silently returns 0.0 on a
new one, so this collector keeps its own previous ``cpu_times`` and derives percentages itself.
On Linux the aggregate and per-core times come from one ``pread`` of ``/proc/stat`` kept open
(:class:`ProcStat`), where psutil opens and parses the file twice, once for each.
"""

from __future__ import annotations

import os
import time
from collections import namedtuple
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import psutil

from traintop.collectors import procfs
from traintop.collectors.rates import CpuUtil, cpu_util
from traintop.collectors.snapshot import CpuCore, CpuSnapshot

PROC_STAT = "/proc/stat"
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest",
              "guest_nice")  # fmt: skip
"""The columns of a ``cpu`` line, as psutil's ``scputimes`` names them; old kernels print fewer."""
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

TOTAL_INDEX = -1
"""``CpuSnapshot.total.index``: the aggregate is not a real core, so it gets no core number."""

FREQ_TTL_S = 5.0
"""How long core frequencies are reused: psutil reads three sysfs files per core for them (768
reads a tick on a 256-core host) or parses /proc/cpuinfo, for a figure shown as one average."""


class CpuCollector:
    """Samples every logical CPU; the first ``collect()`` has ``None`` percentages."""

    def __init__(self, ps: ModuleType | Any = psutil, clock: Callable[[], float] = time.monotonic):
        self._ps = ps
        self._clock = clock
        self._proc_stat = ProcStat() if ps is psutil and os.path.exists(PROC_STAT) else None
        self._prev_cores: Sequence[Any] = ()
        self._prev_total: Any = None
        self._physical: int | None = ps.cpu_count(logical=False)
        self._freqs: Sequence[Any] = ()
        self._freqs_t = float("-inf")

    def collect(self) -> CpuSnapshot:
        """One reading of all cores, the aggregate, frequencies and load average."""
        total_now, cores_now = self._times()
        freqs = self._core_freqs()
        cores = tuple(
            _core(i, cpu_util(self._prev_core(i), t), _at(freqs, i))
            for i, t in enumerate(cores_now)
        )
        cur_mhz = [f.current for f in freqs if f.current]
        max_mhz = [f.max for f in freqs if f.max]
        mean_mhz = sum(cur_mhz) / len(cur_mhz) if cur_mhz else None
        snap = CpuSnapshot(
            cores=cores,
            total=_core(TOTAL_INDEX, cpu_util(self._prev_total, total_now), mean_mhz),
            load_avg=self._load_avg(),
            freq_mhz=mean_mhz,
            freq_max_mhz=max(max_mhz) if max_mhz else None,
            physical_cores=self._physical,
        )
        self._prev_cores, self._prev_total = cores_now, total_now
        return snap

    def _times(self) -> tuple[Any, Sequence[Any]]:
        """``(aggregate, per-core)`` times: one read of /proc/stat, or two psutil calls."""
        if self._proc_stat is not None:
            return self._proc_stat.read()
        return self._ps.cpu_times(), self._ps.cpu_times(percpu=True)

    def _prev_core(self, index: int) -> Any:
        """Previous reading of one core, ``None`` when it was not there (first tick, hotplug)."""
        return self._prev_cores[index] if index < len(self._prev_cores) else None

    def _core_freqs(self) -> Sequence[Any]:
        """Per-core ``scpufreq`` readings, at most ``FREQ_TTL_S`` old, or none where the
        platform or VM hides them."""
        now = self._clock()
        if now - self._freqs_t < FREQ_TTL_S:
            return self._freqs
        try:
            freqs = self._ps.cpu_freq(percpu=True)
        except (AttributeError, NotImplementedError, OSError):
            freqs = ()
        self._freqs, self._freqs_t = freqs or (), now
        return self._freqs

    def _load_avg(self) -> tuple[float, float, float] | None:
        """1/5/15-minute load average; ``None`` where the OS has none."""
        try:
            one, five, fifteen = self._ps.getloadavg()
        except (AttributeError, OSError):
            return None
        return (one, five, fifteen)


def _at(freqs: Sequence[Any], index: int) -> float | None:
    """Current MHz of core ``index``: 0.0 and a missing entry both mean unknown."""
    if index >= len(freqs):
        return None
    return freqs[index].current or None


def _core(index: int, util: CpuUtil | None, freq_mhz: float | None) -> CpuCore:
    """A ``CpuCore`` from a utilization split (``None`` on the first tick)."""
    if util is None:
        return CpuCore(index=index, busy_pct=None, freq_mhz=freq_mhz)
    return CpuCore(
        index=index,
        busy_pct=util.busy_pct,
        user_pct=util.user_pct,
        system_pct=util.system_pct,
        iowait_pct=util.iowait_pct,
        freq_mhz=freq_mhz,
    )


class ProcStat:
    """``psutil.cpu_times()`` and ``cpu_times(percpu=True)`` (the same values, seconds as
    psutil computes them) from one read of ``/proc/stat``."""

    def __init__(self, path: str = PROC_STAT) -> None:
        self._file = procfs.KeptFile(path)
        self._types: dict[int, type] = {}

    def read(self) -> tuple[Any, list[Any]]:
        """``(aggregate, per-core)``: the ``cpu`` line, then each ``cpuN`` line in file order
        (online cores only, as psutil)."""
        lines = self._file.read().split(b"\n")
        total, cores = self._times(lines[0]), []
        for line in lines[1:]:
            if not line.startswith(b"cpu"):  # the cpu lines come first, then intr, ctxt...
                break
            cores.append(self._times(line))
        return total, cores

    def _times(self, line: bytes) -> Any:
        values = line.split()[1 : len(CPU_FIELDS) + 1]
        times = self._types.get(len(values))
        if times is None:
            times = self._types[len(values)] = namedtuple("scputimes", CPU_FIELDS[: len(values)])
        return times(*[float(value) / _CLK_TCK for value in values])
