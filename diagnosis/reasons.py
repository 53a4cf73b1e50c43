"""NVML clocks-event reason bits, grouped the way the throttle rules need them.

The names and severities come from :mod:`traintop.collectors.gpu_reasons`, so the banner and the GPU
panel word a reason the same way.  HW slowdown (0x8) fires for over-temperature *and* for power
spikes or a power brake, so the rules decide its family from the temperature headroom.
"""

from __future__ import annotations

from traintop.collectors import gpu_reasons as nv

HW_SLOWDOWN = nv.HW_SLOWDOWN.bit
THERMAL_BITS = (nv.HW_THERMAL.bit, nv.SW_THERMAL.bit)
POWER_BITS = (nv.HW_POWER_BRAKE.bit, nv.SW_POWER_CAP.bit)
HW_BITS = frozenset(r.bit for r in nv.ALL_REASONS if r.severity == "error")


def label(bit: int) -> str:
    """People-facing name of one reason bit, as nvidia-smi -q prints it."""
    return next((r.name for r in nv.decode_reasons(bit)), f"reason {bit:#x}")
