"""Decode NVML's clocks-event (throttle) reason bitmask into named, ranked reasons.

NVML reports why clocks are below maximum as a 64-bit mask
(``nvmlDeviceGetCurrentClocksEventReasons``).  The UI colours the reasons and the diagnosis
names them, so both need the same table: nvidia-smi's wording, a stable key and a severity.
Severity follows what the user should do: "info" is normal operation (idle, a clock setting),
"warning" is the driver holding clocks back by policy (power or thermal budget), "error" is
hardware protection kicking in (the board is in trouble and training is slowed hard).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClockReason:
    """One clocks-event reason: ``name`` as nvidia-smi -q prints it, ``key`` as its CSV field."""

    bit: int
    key: str
    name: str
    severity: str  # "info", "warning" or "error"


GPU_IDLE = ClockReason(0x1, "gpu_idle", "Idle", "info")
APPLICATIONS_CLOCKS = ClockReason(
    0x2, "applications_clocks_setting", "Applications Clocks Setting", "info"
)
SW_POWER_CAP = ClockReason(0x4, "sw_power_cap", "SW Power Cap", "warning")
HW_SLOWDOWN = ClockReason(0x8, "hw_slowdown", "HW Slowdown", "error")
SYNC_BOOST = ClockReason(0x10, "sync_boost", "Sync Boost", "info")
SW_THERMAL = ClockReason(0x20, "sw_thermal_slowdown", "SW Thermal Slowdown", "warning")
HW_THERMAL = ClockReason(0x40, "hw_thermal_slowdown", "HW Thermal Slowdown", "error")
HW_POWER_BRAKE = ClockReason(0x80, "hw_power_brake_slowdown", "HW Power Brake Slowdown", "error")
DISPLAY_CLOCK = ClockReason(0x100, "display_clock_setting", "Display Clock Setting", "info")

# Ordered by bit, which is also the order nvidia-smi -q lists them in.
ALL_REASONS: tuple[ClockReason, ...] = (
    GPU_IDLE,
    APPLICATIONS_CLOCKS,
    SW_POWER_CAP,
    HW_SLOWDOWN,
    SYNC_BOOST,
    SW_THERMAL,
    HW_THERMAL,
    HW_POWER_BRAKE,
    DISPLAY_CLOCK,
)

REASONS_BY_KEY: dict[str, ClockReason] = {reason.key: reason for reason in ALL_REASONS}

SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2}


def decode_reasons(mask: int | None) -> tuple[ClockReason, ...]:
    """All known reasons set in ``mask``, in bit order; unknown bits are ignored."""
    if not mask:
        return ()
    return tuple(reason for reason in ALL_REASONS if mask & reason.bit)


def throttling_reasons(mask: int | None) -> tuple[ClockReason, ...]:
    """Reasons that slow a busy GPU down: everything except "GPU idle".

    Idle is the driver lowering clocks because nothing runs, which is not a slowdown of work.
    """
    return tuple(reason for reason in decode_reasons(mask) if reason is not GPU_IDLE)


def worst_severity(mask: int | None) -> str | None:
    """The most severe throttling reason's severity, or ``None`` when nothing throttles."""
    reasons = throttling_reasons(mask)
    if not reasons:
        return None
    return max((reason.severity for reason in reasons), key=SEVERITY_RANK.__getitem__)
