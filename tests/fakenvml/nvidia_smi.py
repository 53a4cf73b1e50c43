"""A stand-in for ``nvidia-smi`` over the fake NVML, for the GPU check's fake mode.

``benchmarks/gpu_check.py --fake-nvml`` compares traintop with nvidia-smi, and a machine with no
driver has no nvidia-smi.  This answers the two invocations the check makes, in nvidia-smi's
formats (headers, units, ``[N/A]``, the refusal of an unknown field with exit code 2):
``--query-gpu=FIELDS --format=csv[,noheader][,nounits]`` and ``-q`` (the PCI throughput and
temperature lines).  It reads NVML with raw ``pynvml`` calls, written apart from traintop's
collector, so the comparison has two readers of one card.  Run it with ``LD_LIBRARY_PATH`` on
the fake library, as the check does.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import pynvml as nv

MIB = 1 << 20
REASONS = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)


def _reason(bit: int) -> Callable:
    return lambda h: (
        "Active" if nv.nvmlDeviceGetCurrentClocksEventReasons(h) & bit else "Not Active"
    )


def _mem(attr: str) -> Callable:
    """MiB as nvidia-smi prints them: used rounds up, the others truncate (docs/gpu-check.md)."""

    def read(h) -> int:
        value = getattr(nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2), attr)
        return -(-value // MIB) if attr == "used" else value // MIB

    return read


def _watts(read: Callable) -> Callable:
    return lambda h: f"{read(h) / 1000:.2f}"


# name: (header, unit, read(handle))
FIELDS: dict[str, tuple[str, str, Callable]] = {
    "timestamp": ("timestamp", "", lambda h: time.strftime("%Y/%m/%d %H:%M:%S.000")),
    "driver_version": ("driver_version", "", lambda h: nv.nvmlSystemGetDriverVersion()),
    "count": ("count", "", lambda h: nv.nvmlDeviceGetCount()),
    "index": ("index", "", nv.nvmlDeviceGetIndex),
    "name": ("name", "", nv.nvmlDeviceGetName),
    "uuid": ("uuid", "", nv.nvmlDeviceGetUUID),
    "pci.bus_id": ("pci.bus_id", "", lambda h: nv.nvmlDeviceGetPciInfo(h).busId),
    "utilization.gpu": (
        "utilization.gpu [%]",
        "%",
        lambda h: nv.nvmlDeviceGetUtilizationRates(h).gpu,
    ),
    "utilization.memory": (
        "utilization.memory [%]",
        "%",
        lambda h: nv.nvmlDeviceGetUtilizationRates(h).memory,
    ),
    "memory.total": ("memory.total [MiB]", "MiB", _mem("total")),
    "memory.reserved": ("memory.reserved [MiB]", "MiB", _mem("reserved")),
    "memory.used": ("memory.used [MiB]", "MiB", _mem("used")),
    "memory.free": ("memory.free [MiB]", "MiB", _mem("free")),
    "temperature.gpu": ("temperature.gpu", "", lambda h: nv.nvmlDeviceGetTemperature(h, 0)),
    "power.draw": ("power.draw [W]", "W", _watts(nv.nvmlDeviceGetPowerUsage)),
    "power.limit": ("power.limit [W]", "W", _watts(nv.nvmlDeviceGetPowerManagementLimit)),
    "enforced.power.limit": (
        "enforced.power.limit [W]",
        "W",
        _watts(nv.nvmlDeviceGetEnforcedPowerLimit),
    ),
    "clocks.sm": ("clocks.current.sm [MHz]", "MHz", lambda h: nv.nvmlDeviceGetClockInfo(h, 1)),
    "clocks.mem": ("clocks.current.memory [MHz]", "MHz", lambda h: nv.nvmlDeviceGetClockInfo(h, 2)),
    "clocks.max.sm": ("clocks.max.sm [MHz]", "MHz", lambda h: nv.nvmlDeviceGetMaxClockInfo(h, 1)),
    "clocks.max.mem": (
        "clocks.max.memory [MHz]",
        "MHz",
        lambda h: nv.nvmlDeviceGetMaxClockInfo(h, 2),
    ),
    "pstate": ("pstate", "", lambda h: f"P{nv.nvmlDeviceGetPerformanceState(h)}"),
    "fan.speed": ("fan.speed [%]", "%", nv.nvmlDeviceGetFanSpeed),
    "clocks_event_reasons.active": (
        "clocks_event_reasons.active",
        "",
        lambda h: f"0x{nv.nvmlDeviceGetCurrentClocksEventReasons(h):016X}",
    ),
    "clocks_event_reasons.supported": (
        "clocks_event_reasons.supported",
        "",
        lambda h: f"0x{nv.nvmlDeviceGetSupportedClocksEventReasons(h):016X}",
    ),
} | {
    f"clocks_event_reasons.{key}": (f"clocks_event_reasons.{key}", "", _reason(1 << bit))
    for bit, key in enumerate(REASONS)
}


def _cell(field: str, handle, units: bool) -> str:
    _, unit, read = FIELDS[field]
    try:
        value = read(handle)
    except nv.NVMLError_NotSupported:
        return "[N/A]"
    return f"{value} {unit}" if units and unit else str(value)


def query(fields: list[str], fmt: set[str]) -> int:
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        print(f'Field "{unknown[0]}" is not a valid field to query.\n')
        return 2
    if "noheader" not in fmt:
        print(", ".join(FIELDS[f][0] for f in fields))
    for i in range(nv.nvmlDeviceGetCount()):
        handle = nv.nvmlDeviceGetHandleByIndex(i)
        print(", ".join(_cell(f, handle, "nounits" not in fmt) for f in fields))
    return 0


def _q_value(read: Callable, handle, unit: str) -> str:
    try:
        return f"{read(handle)} {unit}"
    except nv.NVMLError_NotSupported:
        return "N/A"


Q_LINES = (
    ("    PCI", None, ""),
    ("        Tx Throughput", lambda h: nv.nvmlDeviceGetPcieThroughput(h, 0), "KB/s"),
    ("        Rx Throughput", lambda h: nv.nvmlDeviceGetPcieThroughput(h, 1), "KB/s"),
    ("    Temperature", None, ""),
    ("        GPU Current Temp", lambda h: nv.nvmlDeviceGetTemperature(h, 0), "C"),
    ("        GPU Shutdown Temp", lambda h: nv.nvmlDeviceGetTemperatureThreshold(h, 0), "C"),
    ("        GPU Slowdown Temp", lambda h: nv.nvmlDeviceGetTemperatureThreshold(h, 1), "C"),
    ("        GPU Max Operating Temp", lambda h: nv.nvmlDeviceGetTemperatureThreshold(h, 3), "C"),
)


def q() -> int:
    print("\n==============NVSMI LOG==============\n")
    print(f"Driver Version : {nv.nvmlSystemGetDriverVersion()}\n")
    print(f"Attached GPUs : {nv.nvmlDeviceGetCount()}")
    for i in range(nv.nvmlDeviceGetCount()):
        handle = nv.nvmlDeviceGetHandleByIndex(i)
        print(f"GPU {nv.nvmlDeviceGetPciInfo(handle).busId}")
        for label, read, unit in Q_LINES:
            print(label if read is None else f"{label:<50}: {_q_value(read, handle, unit)}")
        print()
    return 0


def main(argv: list[str]) -> int:
    options = dict(arg.partition("=")[::2] for arg in argv)
    nv.nvmlInit()
    try:
        if "-q" in options:
            return q()
        fields = [f.strip() for f in options.get("--query-gpu", "").split(",") if f.strip()]
        return query(fields, set(options.get("--format", "csv").split(",")))
    finally:
        nv.nvmlShutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
