"""The comparison rules: which nvidia-smi field each traintop reading is, and how close is close.

Every reading is compared under nvidia-smi's ``--query-gpu`` name and unit (MiB, W, MHz, %,
masks as integers).  nvidia-smi runs between two traintop readings (before and after), so a
value that moves (utilization, power, clocks) passes when nvidia-smi's lies between the two,
widened by the field's tolerance; a value that cannot move must match exactly.  A field both
sides call unsupported passes; one side reading what the other calls unsupported fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traintop.collectors.nvsmi_query import MIB_RULES

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class Tolerance:
    """``abs`` in the field's unit, or ``rel`` of the reading, whichever is larger; and why."""

    abs: float = 0.0
    rel: float = 0.0
    why: str = "cannot change between the readings: must match exactly"

    def allows(self, reference: float) -> float:
        return max(self.abs, self.rel * abs(reference))


MOVES = "moves between readings a moment apart"
TOLERANCES: dict[str, Tolerance] = {
    "utilization.gpu": Tolerance(10, why="% of the driver's last sample period (1/6 to 1 s)"),
    "utilization.memory": Tolerance(10, why="% of the driver's last sample period (1/6 to 1 s)"),
    "memory.used": Tolerance(2, why="MiB: the job allocates between readings"),
    "memory.free": Tolerance(2, why="MiB: the job allocates between readings"),
    "temperature.gpu": Tolerance(1, why="whole °C: " + MOVES),
    "power.draw": Tolerance(5, 0.05, why="W, a 1 s average on Ampere and newer: " + MOVES),
    "power.limit": Tolerance(0.5, why="W, printed with two decimals"),
    "enforced.power.limit": Tolerance(0.5, why="W, printed with two decimals"),
    "clocks.sm": Tolerance(30, why="MHz: boost moves it in 15 MHz bins"),
    "clocks.mem": Tolerance(1, why="MHz: " + MOVES),
    "fan.speed": Tolerance(2, why="%: " + MOVES),
}
EXACT = Tolerance()
_MEMORY = {
    name: (MIB_RULES[name], f"mem_{name.split('.')[1]}_bytes")
    for name in ("memory.total", "memory.reserved", "memory.used", "memory.free")
}


def from_gpu(gpu: dict[str, Any], driver: str | None = None, count: int | None = None):
    """A GPU reading (``GpuSnapshot`` as a dict, as ``snapshot --json`` prints it) under
    nvidia-smi's field names and units."""
    pstate = gpu.get("pstate")
    return {
        "count": count,
        "driver_version": driver,
        "index": gpu["index"],
        "name": gpu.get("name"),
        "uuid": gpu.get("uuid"),
        "pci.bus_id": gpu.get("pci_bus_id"),
        "utilization.gpu": gpu.get("util_gpu_pct"),
        "utilization.memory": gpu.get("util_mem_pct"),
        # nvidia-smi's rule per field (traintop.collectors.nvsmi_query.MIB_RULES)
        **{name: rule(gpu.get(key)) for name, (rule, key) in _MEMORY.items()},
        "temperature.gpu": gpu.get("temp_c"),
        "power.draw": gpu.get("power_w"),
        "enforced.power.limit": gpu.get("power_limit_w"),
        "clocks.sm": gpu.get("sm_clock_mhz"),
        "clocks.mem": gpu.get("mem_clock_mhz"),
        "clocks.max.sm": gpu.get("sm_clock_max_mhz"),
        "clocks.max.mem": gpu.get("mem_clock_max_mhz"),
        "pstate": None if pstate is None else f"P{pstate}",
        "fan.speed": gpu.get("fan_pct"),
        "clocks_event_reasons.active": gpu.get("clocks_event_reasons"),
        "clocks_event_reasons.supported": gpu.get("clocks_event_reasons_supported"),
    }


@dataclass(frozen=True, slots=True)
class FieldResult:
    """One field compared: the reference, traintop's readings around it, and the verdict."""

    field: str
    ok: bool
    reference: Any
    ours: tuple[Any, ...]
    rule: str

    def row(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "ok": self.ok,
            "nvidia_smi": self.reference,
            "traintop": list(self.ours),
            "rule": self.rule,
        }


def compare_field(name: str, reference: Any, ours: tuple[Any, ...]) -> FieldResult:
    """Is ``reference`` (nvidia-smi) what traintop read just before and just after it?"""
    present = [value for value in ours if value is not None]
    if reference is None or not present:
        ok = reference is None and not present
        return FieldResult(name, ok, reference, ours, "both n/a")
    if isinstance(reference, float) and all(isinstance(v, (int, float)) for v in present):
        return _numeric(name, reference, ours, [float(v) for v in present])
    ok = any(_same(reference, value) for value in present)
    return FieldResult(name, ok, reference, ours, "equal")


def _numeric(name: str, reference: float, ours: tuple, present: list[float]) -> FieldResult:
    tolerance = TOLERANCES.get(name, EXACT)
    slack = tolerance.allows(reference)
    ok = min(present) - slack <= reference <= max(present) + slack
    return FieldResult(name, ok, reference, ours, f"±{slack:g}" if slack else "exact")


def _same(reference: Any, value: Any) -> bool:
    if isinstance(reference, str) and isinstance(value, str):
        return reference.strip().lower() == value.strip().lower()
    return reference == value


def compare_all(reference: dict[str, Any], readings: list[dict[str, Any]]) -> list[FieldResult]:
    """Every field of ``reference`` against the same field of each reading (``rule`` in each
    row: "±N" around the readings, "exact", "equal" for text and masks, "both n/a"; why each
    tolerance is what it is: :func:`tolerance_table`)."""
    return [
        compare_field(name, value, tuple(reading.get(name) for reading in readings))
        for name, value in reference.items()
    ]


def tolerance_table() -> dict[str, str]:
    """The rule of every field with a tolerance, for the report; other fields match exactly."""
    return {
        name: f"±{t.abs:g}" + (f" or {t.rel:.0%}" if t.rel else "") + f": {t.why}"
        for name, t in TOLERANCES.items()
    }
