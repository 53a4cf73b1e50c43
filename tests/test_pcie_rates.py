"""PcieRates (collectors/pcie.py) on counters given directly: 32-bit ones that lap, 64-bit ones
that do not, and NVML's own measurement only where a lap may hide."""

from __future__ import annotations

import pytest

from traintop.collectors.pcie import PcieRates

GIB = 1 << 30


class Measure:
    """NVML's measurement of a direction (KB/s), counting how often it was asked."""

    def __init__(self, kbs: int | None) -> None:
        self.kbs, self.asked = kbs, 0

    def __call__(self, direction: int) -> int | None:
        self.asked += 1
        return self.kbs


def test_a_quiet_32_bit_link_pays_for_nvml_s_measurement_only_once() -> None:
    rates, measure = PcieRates(), Measure(100_000)
    assert rates.update([(0, 32), (0, 32)], 0.0, measure) == (None, None)
    rates.update([(100 << 20, 32), (10 << 20, 32)], 1.0, measure)  # first interval: measured
    assert measure.asked == 2
    tick = rates.update([(300 << 20, 32), (30 << 20, 32)], 2.0, measure)
    assert tick == (pytest.approx(200 << 20, rel=1e-5), pytest.approx(20 << 20, rel=1e-5))
    assert measure.asked == 2


def test_a_busy_32_bit_link_is_measured_until_it_calms_down() -> None:
    rates, measure = PcieRates(), Measure(50 * GIB // 1024)
    rates.update([(0, 32), (0, 32)], 0.0, measure)
    for t in (1.0, 2.0, 3.0):
        tx, _ = rates.update([(int(t) * 7, 32), (0, 32)], t, measure)  # the counter says ~0
        assert tx == 50 * GIB  # a lapped counter's 7 bytes are not believed while busy
    measure.kbs = 0  # the copy ended
    rates.update([(28, 32), (0, 32)], 4.0, measure)
    asked = measure.asked
    assert rates.update([(1028, 32), (0, 32)], 5.0, measure)[0] == 1000
    assert measure.asked == asked  # quiet again: the counter alone


def test_64_bit_counters_never_need_the_measurement_and_a_reset_reads_none() -> None:
    rates, measure = PcieRates(), Measure(1)
    rates.update([(10 * GIB, 64), (0, 64)], 0.0, measure)
    assert rates.update([(30 * GIB, 64), (5, 64)], 2.0, measure) == (
        pytest.approx(10 * GIB, rel=1e-5),
        2.5,
    )
    assert rates.update([(0, 64), (6, 64)], 3.0, measure) == (None, 1.0)  # a driver reload
    assert measure.asked == 0


def test_no_measurement_and_a_lap_risk_gives_no_figure() -> None:
    rates = PcieRates()
    rates.update([(0, 32), (0, 32)], 0.0, Measure(None))
    assert rates.update([(3 * GIB, 32), (1, 32)], 1.0, Measure(None)) == (None, None)
