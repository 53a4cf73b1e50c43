"""The stabilizer: no flicker, switch after the hold time, unknown before the minimum window."""

from __future__ import annotations

import pytest

from tests.diagnosis_factories import Scene
from traintop.diagnosis.api import VerdictStabilizer

CPU_BOUND = Scene(data_wait=0.6, worker_cpu=98, gpu_busy=0.4)
IO_BOUND = Scene(data_wait=0.6, worker_cpu=15, iowait=25, disk_busy=97, disk_await=45)


def at(scene: Scene, end: float, n: int = 11):
    """A 10 s window of ``scene`` that ends at monotonic time ``end``."""
    return scene.window(n=n, start=end - (n - 1))


def test_unknown_until_minimum_window() -> None:
    stab = VerdictStabilizer(min_window_s=3.0)
    seen = [stab.update(CPU_BOUND.window(n=n)).primary.bottleneck for n in range(1, 6)]
    assert seen == ["unknown", "unknown", "unknown", "data_cpu", "data_cpu"]


def test_alternating_input_does_not_flicker() -> None:
    stab = VerdictStabilizer(switch_after_s=3.0)
    shown = [stab.update(at((CPU_BOUND, IO_BOUND)[t % 2], 100.0 + t)) for t in range(12)]
    assert {v.primary.bottleneck for v in shown} == {"data_cpu"}
    assert shown[1].also[0].bottleneck == "data_io"


def test_switches_after_hold_time() -> None:
    stab = VerdictStabilizer(switch_after_s=3.0)
    for t in range(5):
        assert stab.update(at(CPU_BOUND, 100.0 + t)).primary.bottleneck == "data_cpu"
    shown = [stab.update(at(IO_BOUND, 105.0 + t)).primary.bottleneck for t in range(5)]
    assert shown == ["data_cpu", "data_cpu", "data_cpu", "data_io", "data_io"]


def test_since_counts_from_when_the_primary_first_won() -> None:
    stab = VerdictStabilizer(switch_after_s=2.0)
    assert stab.update(at(CPU_BOUND, 100.0)).since_s == 0.0
    assert stab.update(at(CPU_BOUND, 104.0)).since_s == 4.0
    stab.update(at(IO_BOUND, 105.0))
    switched = stab.update(at(IO_BOUND, 107.0))
    assert switched.primary.bottleneck == "data_io"
    assert switched.since_s == 2.0


def test_held_primary_keeps_fresh_evidence() -> None:
    stab = VerdictStabilizer(switch_after_s=5.0)
    stab.update(at(CPU_BOUND, 100.0))
    both = CPU_BOUND.but(data_wait=0.5, swap_bytes_per_s=100e6)
    held = stab.update(at(both, 101.0))
    assert held.primary.bottleneck == "data_cpu"
    assert held.primary.evidence[0].text == "data wait 50 % of time"
    assert held.also[0].bottleneck == "host_memory"


def test_losing_data_resets_to_unknown_at_once() -> None:
    stab = VerdictStabilizer()
    stab.update(at(CPU_BOUND, 100.0))
    assert stab.update(CPU_BOUND.window(n=1, start=101.0)).primary.bottleneck == "unknown"
    assert stab.update(at(IO_BOUND, 112.0)).primary.bottleneck == "data_io"


def test_rejects_negative_settings() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        VerdictStabilizer(switch_after_s=-1)


def test_update_diagnoses_the_requested_job() -> None:
    stab = VerdictStabilizer()
    assert stab.update(at(CPU_BOUND, 100.0), job_pid=4242).primary.bottleneck == "data_cpu"
    assert "pid 7" in stab.update(at(CPU_BOUND, 101.0), job_pid=7).primary.summary
