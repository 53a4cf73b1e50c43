"""What the card itself says it did over a tick, beyond ``nvmlDeviceGetUtilizationRates``.

``GetUtilizationRates`` answers for the driver's last sample period only (1/6 s to 1 s), so a
1 s tick sees a slice of it.  Three more sources, each optional per GPU and per driver, each
asked once per tick on the sampler thread:

* the driver's ring of utilization samples (``nvmlDeviceGetSamples``), averaged over the tick;
* per-process utilization: ``nvmlDeviceGetProcessesUtilizationInfo`` first (driver R550+; on
  Blackwell the older call answers 0 for every process), else ``nvmlDeviceGetProcessUtilization``;
* GPM on Hopper and newer (``nvmlGpmSampleGet`` each tick, ``nvmlGpmMetricsGet`` over this tick's
  sample and the last one): SM active, SM occupancy, tensor active, DRAM bandwidth, the counters
  DCGM's profiling fields read, with no DCGM daemon.

Both sampled calls take the timestamp of the last sample seen and answer NOT_FOUND when nothing
newer exists.  Per-process values above 100 % are garbage some drivers return (2147483632,
37100 for zombies) and read as unknown.  Under MIG none of these has per-GPU meaning: not asked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

GPU_UTILIZATION_SAMPLES = 1  # NVML_GPU_UTILIZATION_SAMPLES
FIRST_LOOK_BACK_US = 1_000_000  # with no timestamp yet, the driver answers all it kept: 1 s of it
HOLD_S = 1.0  # a NOT_FOUND this soon after an answer is a fast tick, not an idle GPU
VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # by valueType
# GpuSnapshot field -> NVML_GPM_METRIC_*: SM_UTIL, SM_OCCUPANCY, ANY_TENSOR_UTIL, DRAM_BW_UTIL.
GPM_METRICS = {
    "sm_active_pct": 2,
    "sm_occupancy_pct": 3,
    "tensor_active_pct": 5,
    "dram_active_pct": 10,
}

Probe = Callable[..., Any]
"""``_Gpu.probe`` (collectors/gpu.py): ``(key, function, *args, empty=...)``, ``None`` when the
driver cannot answer, ``empty`` on NOT_FOUND; raises ``GpuLost``."""
PerPid = dict[int, tuple[float | None, float | None]]
"""pid -> (SM %, memory %) over the tick; a pid absent had no utilization (0 %)."""


def percent(value: float) -> float | None:
    """A utilization reading, or ``None`` where it cannot be one (garbage from the driver)."""
    return float(value) if 0 <= value <= 100 else None


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def _recent(rows: list, first: bool) -> list:
    """The rows of this tick; on the first call, those of the last second the driver kept."""
    if not first or not rows:
        return rows
    newest = max(row.timeStamp for row in rows)
    return [row for row in rows if row.timeStamp >= newest - FIRST_LOOK_BACK_US]


class _UtilSamples:
    """``nvmlDeviceGetSamples(GPU_UTILIZATION_SAMPLES)``: the mean of the samples since the last."""

    def __init__(self, nvml: ModuleType, handle: Any, probe: Probe) -> None:
        self.call = (nvml.nvmlDeviceGetSamples, handle, GPU_UTILIZATION_SAMPLES)
        self.probe, self.last_seen = probe, 0

    def read(self) -> float | None:
        got = self.probe("samples", *self.call, self.last_seen, empty=())
        if not got:
            return None  # unsupported, or no sample since the last tick
        value_type, rows = got
        rows = _recent(list(rows), first=self.last_seen == 0)
        if not rows:
            return None
        self.last_seen = max(row.timeStamp for row in rows)
        field = VALUE_FIELDS[value_type] if 0 <= value_type < len(VALUE_FIELDS) else "uiVal"
        return _mean(percent(getattr(row.sampleValue, field)) for row in rows)


class _ProcessUtil:
    """Per-process SM and memory utilization, newer call first, averaged per pid over the tick."""

    def __init__(self, nvml: ModuleType, handle: Any, probe: Probe) -> None:
        names = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")
        self.calls = [(f"procutil_{n}", getattr(nvml, name)) for n, name in enumerate(names)
                      if hasattr(nvml, name)]  # fmt: skip
        self.handle, self.probe = handle, probe
        self.last_seen = 0
        self.values: PerPid = {}
        self.answered_at: float | None = None

    def read(self, now: float) -> PerPid | None:
        """This tick's values; ``None`` where the driver gives none."""
        for key, call in self.calls:
            rows = self.probe(key, call, self.handle, self.last_seen, empty=())
            if rows is not None:
                return self._update(list(rows), now)
        return None

    def _update(self, rows: list, now: float) -> PerPid:
        if not rows:  # NOT_FOUND: no process ran a kernel since the last sample seen
            held = self.answered_at is not None and now - self.answered_at < HOLD_S
            self.values = self.values if held else {}
            return self.values
        rows = _recent(rows, first=self.last_seen == 0)
        self.last_seen = max(row.timeStamp for row in rows)
        by_pid: dict[int, list] = {}
        for row in rows:
            by_pid.setdefault(row.pid, []).append(row)
        self.values = {
            pid: (_mean(percent(r.smUtil) for r in got), _mean(percent(r.memUtil) for r in got))
            for pid, got in by_pid.items()
        }
        self.answered_at = now
        return self.values


def gpm_request(nvml: ModuleType) -> Any:
    """A ``nvmlGpmMetricsGet`` request for the ``GPM_METRICS`` traintop reads, its two samples
    left to set (the benchmarks and the GPU check time the same request)."""
    get = nvml.c_nvmlGpmMetricsGet_t()
    get.version, get.numMetrics = nvml.NVML_GPM_METRICS_GET_VERSION, len(GPM_METRICS)
    for i, metric in enumerate(GPM_METRICS.values()):
        get.metrics[i].metricId = metric
    return get


class _Gpm:
    """GPM: two samples allocated once, refilled in turn; metrics need the previous tick's."""

    def __init__(self, nvml: ModuleType, handle: Any, probe: Probe) -> None:
        self.nvml, self.handle, self.probe = nvml, handle, probe
        self.off = not hasattr(nvml, "nvmlGpmMetricsGet")  # an nvidia-ml-py without GPM
        self.samples: list[Any] = []  # [previous, current]
        self.have_previous = False
        self.get: Any = None

    def read(self) -> dict[str, float | None]:
        if not self._ready():
            return {}
        previous, current = self.samples
        if self.probe("gpm_sample", self.nvml.nvmlGpmSampleGet, self.handle, current) is None:
            self.have_previous = False
            return {}
        values = self._metrics(previous, current) if self.have_previous else {}
        self.samples.reverse()
        self.have_previous = True
        return values

    def _ready(self) -> bool:
        if self.samples or self.off:
            return not self.off
        nv = self.nvml
        support = self.probe("gpm", nv.nvmlGpmQueryDeviceSupport, self.handle)
        self.off = support is None or not support.isSupportedDevice
        if not self.off:
            for _ in range(2):
                sample = self.probe("gpm_alloc", nv.nvmlGpmSampleAlloc)
                self.off = self.off or sample is None
                self.samples += [sample] if sample is not None else []
        if self.off:
            self.close()
        return not self.off

    def _metrics(self, previous: Any, current: Any) -> dict[str, float | None]:
        nv = self.nvml
        if self.get is None:
            self.get = gpm_request(nv)
        self.get.sample1, self.get.sample2 = previous, current
        if self.probe("gpm_metrics", nv.nvmlGpmMetricsGet, self.get) is None:
            return {}
        answers = self.get.metrics
        return {
            name: percent(answers[i].value) if answers[i].nvmlReturn == 0 else None
            for i, name in enumerate(GPM_METRICS)
        }

    def close(self) -> None:
        """Free the samples (host memory NVML allocated); safe after the GPU was lost."""
        for sample in self.samples:
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlGpmSampleFree(sample)
        self.samples, self.have_previous = [], False


class GpuActivity:
    """One GPU's activity sources; ``read`` once per tick, ``close`` when the GPU goes away."""

    def __init__(self, nvml: ModuleType, handle: Any, probe: Probe) -> None:
        self.samples = _UtilSamples(nvml, handle, probe)
        self.processes = _ProcessUtil(nvml, handle, probe)
        self.gpm = _Gpm(nvml, handle, probe)

    def read(self, now: float, mig: bool) -> tuple[dict[str, float | None], PerPid | None]:
        """GpuSnapshot fields (tick mean, GPM) and per-pid utilization; nothing under MIG."""
        if mig:
            return {}, None
        fields = {"util_gpu_mean_pct": self.samples.read(), **self.gpm.read()}
        return fields, self.processes.read(now)

    def close(self) -> None:
        self.gpm.close()
