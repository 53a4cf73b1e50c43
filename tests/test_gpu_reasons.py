"""The clocks-event reason table: bits, nvidia-smi names, severities, idle exclusion."""

from __future__ import annotations

import pynvml
import pytest

from traintop.collectors.gpu_reasons import (
    ALL_REASONS,
    REASONS_BY_KEY,
    decode_reasons,
    throttling_reasons,
    worst_severity,
)


@pytest.mark.parametrize(
    ("constant", "key", "name", "severity"),
    [
        ("nvmlClocksEventReasonGpuIdle", "gpu_idle", "Idle", "info"),
        (
            "nvmlClocksEventReasonApplicationsClocksSetting",
            "applications_clocks_setting",
            "Applications Clocks Setting",
            "info",
        ),
        ("nvmlClocksEventReasonSwPowerCap", "sw_power_cap", "SW Power Cap", "warning"),
        ("nvmlClocksEventReasonHwSlowdown", "hw_slowdown", "HW Slowdown", "error"),
        ("nvmlClocksEventReasonSyncBoost", "sync_boost", "Sync Boost", "info"),
        (
            "nvmlClocksEventReasonSwThermalSlowdown",
            "sw_thermal_slowdown",
            "SW Thermal Slowdown",
            "warning",
        ),
        (
            "nvmlClocksEventReasonHwThermalSlowdown",
            "hw_thermal_slowdown",
            "HW Thermal Slowdown",
            "error",
        ),
        (
            "nvmlClocksEventReasonHwPowerBrakeSlowdown",
            "hw_power_brake_slowdown",
            "HW Power Brake Slowdown",
            "error",
        ),
        (
            "nvmlClocksEventReasonDisplayClockSetting",
            "display_clock_setting",
            "Display Clock Setting",
            "info",
        ),
    ],
)
def test_each_bit_matches_pynvml(constant: str, key: str, name: str, severity: str) -> None:
    (reason,) = decode_reasons(getattr(pynvml, constant))
    assert (reason.key, reason.name, reason.severity) == (key, name, severity)
    assert REASONS_BY_KEY[key] is reason


def test_table_covers_all_known_bits_once() -> None:
    assert sum(r.bit for r in ALL_REASONS) == pynvml.nvmlClocksEventReasonAll
    assert [r.bit for r in ALL_REASONS] == sorted(r.bit for r in ALL_REASONS)


@pytest.mark.parametrize(
    ("mask", "keys"),
    [
        (None, ()),
        (0, ()),
        (0x28, ("hw_slowdown", "sw_thermal_slowdown")),
        (0x1FF, tuple(r.key for r in ALL_REASONS)),
        (0x1000 | 0x4, ("sw_power_cap",)),  # unknown future bits are ignored
    ],
)
def test_decode_in_bit_order(mask: int | None, keys: tuple[str, ...]) -> None:
    assert tuple(r.key for r in decode_reasons(mask)) == keys


def test_throttling_excludes_idle() -> None:
    assert throttling_reasons(0x1) == ()
    assert [r.key for r in throttling_reasons(0x5)] == ["sw_power_cap"]


@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        (None, None),
        (0x1, None),
        (0x10, "info"),
        (0x5, "warning"),
        (0x24, "warning"),
        (0x2C, "error"),
    ],
)
def test_worst_severity(mask: int | None, expected: str | None) -> None:
    assert worst_severity(mask) == expected
