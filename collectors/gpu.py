"""NVIDIA GPUs through NVML (``pynvml``, from nvidia-ml-py), one immutable snapshot per tick.

Every metric is optional: boards answer NOT_SUPPORTED for whole families of calls (fans on SXM,
utilization under MIG), old drivers lack newer symbols, and a GPU can fall off the bus at any
time.  Like btop, each metric is probed on first use and never asked again once the driver said
it cannot answer, which also keeps a tick cheap.  Static facts (name, limits, thresholds) are
read once per device; counters come from one ``nvmlDeviceGetFieldValues`` batch.  What the card
did over the tick (utilization samples, per-process utilization, GPM) is
``collectors/gpu_activity.py``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

from traintop.collectors.gpu_activity import GpuActivity, PerPid
from traintop.collectors.pcie import PcieRates, counter_value
from traintop.collectors.snapshot import GpuProcess, GpuSnapshot, GpuStatus

INIT_RETRY_S = 10.0  # a driver may be loaded after traintop starts; do not hammer it
PCIE_TX_FIELD, PCIE_RX_FIELD = 197, 198  # NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES: collectors/pcie.py
# NOT_SUPPORTED, FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH, DEPRECATED: asking again is futile.
GIVE_UP_CODES = frozenset({3, 13, 25, 26})
GPU_IS_LOST = 15
NOT_FOUND = 6  # the sampled calls: nothing newer than the timestamp passed
PSTATE_UNKNOWN = 32
INIT_MESSAGES = {
    12: "NVML library not found",
    9: "NVIDIA driver not loaded",
    4: "no permission to talk to the NVIDIA driver",
    18: "NVIDIA driver and NVML library versions differ (reload the driver)",
}


Alternatives = tuple[tuple[str, Callable[..., Any], tuple[Any, ...]], ...]
"""Calls for one metric, newer API first: ``(probe key, function, arguments)`` each."""


class GpuLost(Exception):
    """Raised inside a sample when NVML says GPU_IS_LOST; the device stays lost from then on."""


class _Gpu:
    """One device: its handle, facts read once, metrics it cannot answer, last PCIe counters."""

    def __init__(self, nvml: ModuleType, index: int, previous: _Gpu | None = None) -> None:
        self.nvml, self.index = nvml, index
        self.handle: Any = None
        self.lost = False
        self.unsupported: set[str] = set()
        self.static: dict[str, Any] = dict(previous.identity()) if previous else {}
        self.pcie = PcieRates()
        self.errors: list[str] = []
        self.memory_v2 = partial(nvml.nvmlDeviceGetMemoryInfo, version=nvml.nvmlMemory_v2)
        self.temperature: Alternatives = ()
        self.reasons: Alternatives = ()
        self.processes: tuple[tuple[str, Alternatives], ...] = ()
        self.activity: GpuActivity | None = None

    def identity(self) -> dict[str, Any]:
        """Name, uuid and bus id, kept so a lost GPU is still recognisable."""
        return {k: self.static.get(k) for k in ("name", "uuid", "pci_bus_id")}

    def probe(self, key: str, call: Callable[..., Any], *args: Any, empty: Any = None) -> Any:
        """Call NVML for one metric; ``None`` when unavailable, remembering permanent refusals;
        ``empty`` when a sampled call has nothing new (NOT_FOUND)."""
        if key in self.unsupported:
            return None
        try:
            return call(*args)
        except self.nvml.NVMLError as exc:
            if exc.value == GPU_IS_LOST:
                raise GpuLost from exc
            if exc.value == NOT_FOUND and empty is not None:
                return empty
            if exc.value in GIVE_UP_CODES:
                self.unsupported.add(key)
            else:
                self.errors.append(f"{key}: {exc}")
            return None
        except self.nvml.NVMLLibraryMismatchError:  # not an NVMLError subclass
            self.unsupported.add(key)
            return None

    def first(self, calls: Alternatives) -> Any:
        """The first alternative that answers (newer API first, deprecated fallback after)."""
        for key, call, args in calls:
            value = self.probe(key, call, *args)
            if value is not None:
                return value
        return None

    def alternatives(self, key: str, *calls: tuple[Any, ...]) -> Alternatives:
        """``(function name, arguments...)`` alternatives as probe calls numbered ``key#0``,
        ``key#1``..., made once per device, not every tick; a function this pynvml lacks (an
        older nvidia-ml-py) is left out, as a driver that lacks it would be."""
        return tuple(
            (f"{key}#{n}", function, tuple(args))
            for n, (name, *args) in enumerate(calls)
            if (function := getattr(self.nvml, name, None)) is not None
        )

    def open(self) -> None:
        """Get the handle and the facts that do not change while the driver is loaded."""
        nv = self.nvml
        self.handle = h = self.probe("handle", nv.nvmlDeviceGetHandleByIndex, self.index)
        if h is None:
            return
        self._prepare(h)
        pci = self.probe("pci", nv.nvmlDeviceGetPciInfo, h)
        mig = self.probe("mig", nv.nvmlDeviceGetMigMode, h)
        limit_mw = self.probe("power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, h)

        def threshold(kind: int) -> int | None:
            return self.probe(f"threshold{kind}", nv.nvmlDeviceGetTemperatureThreshold, h, kind)

        self.static.update(
            name=_text(self.probe("name", nv.nvmlDeviceGetName, h)),
            uuid=_text(self.probe("uuid", nv.nvmlDeviceGetUUID, h)),
            pci_bus_id=_text(pci.busId) if pci is not None else None,
            sm_max=self.probe("sm_max", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
            mem_max=self.probe("mem_max", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM),
            shutdown=threshold(nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
            slowdown=threshold(nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
            max_op=threshold(nv.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
            power_limit_w=limit_mw / 1000.0 if limit_mw is not None else None,
            mig=bool(mig[0]) if mig is not None else None,
            supported=self.first(
                self.alternatives(
                    "supported",
                    ("nvmlDeviceGetSupportedClocksEventReasons", h),
                    ("nvmlDeviceGetSupportedClocksThrottleReasons", h),
                )
            ),
        )

    def _prepare(self, h: Any) -> None:
        """The per-tick metrics that have a deprecated fallback (see ``first``)."""
        sensor = self.nvml.NVML_TEMPERATURE_GPU
        self.activity = GpuActivity(self.nvml, h, self.probe)
        self.temperature = self.alternatives(
            "temp",
            ("nvmlDeviceGetTemperatureV", h, sensor),
            ("nvmlDeviceGetTemperature", h, sensor),
        )
        self.reasons = self.alternatives(
            "reasons",
            ("nvmlDeviceGetCurrentClocksEventReasons", h),
            ("nvmlDeviceGetCurrentClocksThrottleReasons", h),
        )
        self.processes = tuple(
            (kind, self.alternatives(f"procs_{kind}", (name, h), (f"{name}_v2", h)))
            for kind, name in (
                ("C", "nvmlDeviceGetComputeRunningProcesses"),
                ("G", "nvmlDeviceGetGraphicsRunningProcesses"),
            )
        )

    def sample(self, now: float) -> GpuSnapshot:
        """Read this tick's values; a GPU that is lost answers with its last known identity."""
        self.errors = []
        try:
            if self.lost:
                raise GpuLost
            if self.handle is None:
                self.open()
            if self.handle is None:
                return GpuSnapshot(index=self.index, error="; ".join(self.errors) or None)
            return self._read(now)
        except GpuLost:
            self.lost = True
            self.close()
            return GpuSnapshot(index=self.index, lost=True, error="GPU is lost", **self.identity())

    def close(self) -> None:
        """Release what NVML allocated for this GPU (GPM samples)."""
        if self.activity is not None:
            self.activity.close()

    def _read(self, now: float) -> GpuSnapshot:
        nv, h, s = self.nvml, self.handle, self.static
        util = self.probe("util", nv.nvmlDeviceGetUtilizationRates, h)
        total, used, reserved, free = self._memory()
        power_mw = self.probe("power", nv.nvmlDeviceGetPowerUsage, h)
        pstate = self.probe("pstate", nv.nvmlDeviceGetPerformanceState, h)
        fan = self.probe("fan", nv.nvmlDeviceGetFanSpeed, h)
        rx, tx = self._pcie(now)
        if self.activity is None:  # made with the handle, in open()
            raise GpuLost
        counters, per_pid = self.activity.read(now, mig=bool(s["mig"]))
        activity: dict[str, Any] = dict(counters)  # GpuSnapshot's keyword names, each a float
        return GpuSnapshot(
            index=self.index,
            **self.identity(),
            error="; ".join(self.errors) or None,
            util_gpu_pct=_num(util.gpu if util is not None else None),
            util_mem_pct=_num(util.memory if util is not None else None),
            mem_total_bytes=total,
            mem_used_bytes=used,
            mem_reserved_bytes=reserved,
            mem_free_bytes=free,
            temp_c=_num(self.first(self.temperature)),
            temp_slowdown_c=_num(s["slowdown"]),
            temp_shutdown_c=_num(s["shutdown"]),
            temp_max_operating_c=_num(s["max_op"]),
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            power_limit_w=s["power_limit_w"],
            sm_clock_mhz=self.probe("sm", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
            sm_clock_max_mhz=s["sm_max"],
            mem_clock_mhz=self.probe("memclk", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
            mem_clock_max_mhz=s["mem_max"],
            pstate=pstate if pstate != PSTATE_UNKNOWN else None,
            fan_pct=_num(fan),
            clocks_event_reasons=self.first(self.reasons),
            clocks_event_reasons_supported=s["supported"],
            pcie_rx_bytes_per_s=rx,
            pcie_tx_bytes_per_s=tx,
            mig_mode=s["mig"],
            processes=self._processes(total, per_pid),
            **activity,
        )

    def _memory(self) -> tuple[int | None, int | None, int | None, int | None]:
        """(total, used, reserved, free) bytes; v2 excludes reserved from used, like nvidia-smi."""
        mem = self.probe("mem_v2", self.memory_v2, self.handle)
        if mem is not None:
            return mem.total, mem.used, mem.reserved, mem.free
        mem = self.probe("mem_v1", self.nvml.nvmlDeviceGetMemoryInfo, self.handle)
        if mem is None:
            return None, None, None, None
        return mem.total, mem.used, None, mem.free

    def _pcie(self, now: float) -> tuple[float | None, float | None]:
        """(rx, tx) bytes/s from the cumulative counters (NVML's own measurement when they may
        have lapped: collectors/pcie.py); ``None`` until two readings exist."""
        fields = [PCIE_TX_FIELD, PCIE_RX_FIELD]
        values = self.probe("pcie", self.nvml.nvmlDeviceGetFieldValues, self.handle, fields)
        if values is None:
            return None, None
        codes = [v.nvmlReturn for v in values]  # each a Python-level attribute read in pynvml
        if GPU_IS_LOST in codes:
            raise GpuLost
        if any(codes):
            self.unsupported.add("pcie")
            return None, None
        nv, h = self.nvml, self.handle
        measure = partial(self.probe, "pcie_throughput", nv.nvmlDeviceGetPcieThroughput, h)
        tx, rx = self.pcie.update([counter_value(v) for v in values], now, measure)
        return rx, tx

    def _processes(self, total: int | None, per_pid: PerPid | None) -> tuple[GpuProcess, ...]:
        """Compute and graphics processes, merged per pid ("C+G") with nonsense rows dropped;
        each with its utilization where the driver gives it (no sample: 0 %, as nvitop)."""
        rows: dict[int, GpuProcess] = {}
        for kind, calls in self.processes:
            for p in self.first(calls) or ():
                used = p.usedGpuMemory
                if p.pid <= 0 or (used is not None and total is not None and used > total):
                    continue
                seen = rows.get(p.pid)
                sm, mem = (None, None) if per_pid is None else per_pid.get(p.pid, (0.0, 0.0))
                rows[p.pid] = (
                    GpuProcess(p.pid, used, kind, sm, mem)
                    if seen is None
                    else GpuProcess(p.pid, seen.used_memory_bytes, "C+G", sm, mem)
                )
        return tuple(rows.values())


class GpuCollector:
    """Samples every NVIDIA GPU; never raises, reports "no NVML" through ``GpuStatus``."""

    def __init__(self, nvml: ModuleType | None = None, clock: Callable[[], float] = time.monotonic):
        self._nvml = nvml
        self._clock = clock
        self._lock = threading.Lock()  # collect() may be called from several threads
        self._initialized = False
        self._next_init: float | None = None
        self._status = GpuStatus(available=False, message="NVML not initialised yet")
        self._gpus: list[_Gpu] = []

    def collect(self) -> tuple[tuple[GpuSnapshot, ...], GpuStatus]:
        """One snapshot per GPU plus whether NVML works at all."""
        with self._lock:
            if not self._ensure_init():
                return (), self._status
            nv = self._loaded()
            try:
                count = nv.nvmlDeviceGetCount()
            except nv.NVMLError as exc:
                self._fail(_init_message(exc))
                return (), self._status
            if count != len(self._gpus):
                self._gpus = self._open_all(count)
            now = self._clock()
            return tuple(gpu.sample(now) for gpu in self._gpus), self._status

    def close(self) -> None:
        """Release NVML (its init is reference counted); safe to call twice."""
        with self._lock:
            if self._initialized:
                self._shutdown()

    def _open_all(self, count: int) -> list[_Gpu]:
        old = {gpu.index: gpu for gpu in self._gpus}
        for gpu in self._gpus:
            gpu.close()
        return [_Gpu(self._loaded(), i, previous=old.get(i)) for i in range(count)]

    def _ensure_init(self) -> bool:
        if self._initialized:
            return True
        now = self._clock()
        if self._next_init is not None and now < self._next_init:
            return False
        self._next_init = now + INIT_RETRY_S
        if self._nvml is None and not self._import_nvml():
            return False
        nv = self._loaded()
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            self._status = GpuStatus(available=False, message=_init_message(exc))
            return False
        except nv.NVMLLibraryMismatchError:
            self._status = GpuStatus(available=False, message="NVML library version mismatch")
            return False
        self._initialized = True
        self._status = self._driver_status()
        return True

    def _import_nvml(self) -> bool:
        try:
            import pynvml  # imported late: a missing package must become a status message
        except ImportError:
            self._status = GpuStatus(available=False, message="nvidia-ml-py is not installed")
            return False
        self._nvml = pynvml
        return True

    def _loaded(self) -> ModuleType:
        """The NVML module, which ``_ensure_init`` loads before anything calls into it."""
        if self._nvml is None:
            raise RuntimeError("NVML called before it was loaded")
        return self._nvml

    def _driver_status(self) -> GpuStatus:
        nv = self._loaded()
        try:
            driver = _text(nv.nvmlSystemGetDriverVersion())
            cuda = nv.nvmlSystemGetCudaDriverVersion()
        except nv.NVMLError:
            return GpuStatus(available=True)
        return GpuStatus(True, None, driver, f"{cuda // 1000}.{cuda % 1000 // 10}")

    def _fail(self, message: str) -> None:
        self._shutdown()
        self._status = GpuStatus(available=False, message=message)
        self._next_init = self._clock() + INIT_RETRY_S

    def _shutdown(self) -> None:
        nv = self._loaded()
        for gpu in self._gpus:
            gpu.close()
        with contextlib.suppress(nv.NVMLError):  # a vanished driver has nothing to release
            nv.nvmlShutdown()
        self._initialized = False
        self._gpus = []


def _init_message(exc: Exception) -> str:
    code = getattr(exc, "value", 0)  # 0: NVML_SUCCESS, which has no message
    return INIT_MESSAGES.get(code, f"NVML error: {exc}")


def _text(value: str | bytes | None) -> str | None:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _num(value: int | None) -> float | None:
    return None if value is None else float(value)
