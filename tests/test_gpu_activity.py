"""The card's activity counters (collectors/gpu_activity.py) against the compiled fake NVML:
utilization samples, per-process utilization (both calls), GPM; supported, unsupported, garbage,
MIG, an old driver without the symbols, a GPU lost."""

from __future__ import annotations

import pynvml
import pytest

from traintop.collectors.gpu import GpuCollector

from .test_gpu_collector import Clock

PID = 41200


def collector(fake, clock: Clock, *lines: str) -> GpuCollector:
    fake.directive("devices 1", *lines)
    fake.set_time(clock.now)
    return GpuCollector(pynvml, clock=clock)


@pytest.fixture
def clock(fake_nvml) -> Clock:
    return Clock(fake_nvml)


@pytest.fixture
def old_clock(fake_nvml_old) -> Clock:
    return Clock(fake_nvml_old)


def gpu(c: GpuCollector):
    return c.collect()[0][0]


def process(c: GpuCollector, pid: int = PID):
    return next(p for p in gpu(c).processes if p.pid == pid)


# ---- utilization samples ----------------------------------------------------------------------


def test_tick_mean_covers_every_sample_since_the_last_tick(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, "0 set util.gpu 60", "0 wave util.gpu 30 2")
    clock.advance(10.0)
    gpu(c)  # first tick: the last second the driver kept
    clock.advance(1.0)  # t = 11 s: samples at 10 1/6 .. 11 s, a half period of the wave
    g = gpu(c)
    # samples at 10+k/6 s, k = 1..6, of 60 + 30 sin(pi t): the mean of that half-wave, not the
    # instant (60 at t = 11)
    expected = sum(60 + round(30 * __import__("math").sin(3.141592653589793 * (10 + k / 6)))
                   for k in range(1, 7)) / 6  # fmt: skip
    assert g.util_gpu_mean_pct == pytest.approx(expected)
    assert g.util_gpu_pct == 60.0


def test_no_new_sample_reads_none_and_mig_has_no_samples(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, "0 set util.gpu 70")
    assert gpu(c).util_gpu_mean_pct == 70.0
    assert gpu(c).util_gpu_mean_pct is None  # the clock did not move: NOT_FOUND
    fake_nvml.directive("0 set mig 1")
    clock.advance(1.0)
    again = GpuCollector(pynvml, clock=clock)
    assert gpu(again).util_gpu_mean_pct is None


# ---- per-process utilization ------------------------------------------------------------------


def test_newer_call_fills_each_gpu_process(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, f"0 proc {PID} 1073741824", "0 proc 41300 1048576",
                  f"0 procutil {PID} 68 21")  # fmt: skip
    procs = {p.pid: (p.sm_util_pct, p.mem_util_pct) for p in gpu(c).processes}
    assert procs == {PID: (68.0, 21.0), 41300: (0.0, 0.0)}  # no sample: it ran no kernel


def test_older_call_when_the_device_answers_only_it(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, "0 procutil_api old", f"0 proc {PID} 1073741824",
                  f"0 procutil {PID} 55 12")  # fmt: skip
    assert (process(c).sm_util_pct, process(c).mem_util_pct) == (55.0, 12.0)
    unsupported = c._gpus[0].unsupported
    assert "procutil_0" in unsupported and "procutil_1" not in unsupported


def test_old_driver_without_the_newer_symbol_uses_the_older_call(fake_nvml_old, old_clock) -> None:
    c = collector(fake_nvml_old, old_clock, "0 procutil_api old", f"0 proc {PID} 1073741824",
                  f"0 procutil {PID} 40 9")  # fmt: skip
    g = gpu(c)
    assert (g.processes[0].sm_util_pct, g.sm_active_pct, g.error) == (40.0, None, None)


def test_no_per_process_call_reads_none(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, "0 procutil_api none", f"0 proc {PID} 1073741824")
    assert process(c).sm_util_pct is None


def test_garbage_values_read_unknown(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, f"0 proc {PID} 1073741824", "0 proc 41300 1048576",
                  f"0 procutil {PID} 2147483632 5", "0 procutil 41300 37100 101")  # fmt: skip
    procs = {p.pid: (p.sm_util_pct, p.mem_util_pct) for p in gpu(c).processes}
    assert procs == {PID: (None, 5.0), 41300: (None, None)}


def test_mig_has_no_per_process_values(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, "0 preset a100", f"0 proc {PID} 1073741824",
                  f"0 procutil {PID} 50 5")  # fmt: skip
    assert process(c).sm_util_pct is None


def test_last_seen_timestamp_no_new_sample_holds_then_idles(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, f"0 proc {PID} 1073741824", f"0 procutil {PID} 77 30")
    assert process(c).sm_util_pct == 77.0
    clock.now += 0.1  # a fast tick inside one sample period: the same sample, not "idle"
    assert process(c).sm_util_pct == 77.0
    fake_nvml.directive("0 noprocutil")  # the process stops running kernels
    clock.advance(2.0)
    assert process(c).sm_util_pct == 0.0


def test_a_process_seen_twice_in_a_tick_reads_its_mean(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, f"0 proc {PID} 1073741824", f"0 procutil {PID} 60 20")
    gpu(c)
    fake_nvml.directive(f"0 procutil {PID} 80 40")
    clock.advance(1.0)
    assert (process(c).sm_util_pct, process(c).mem_util_pct) == (80.0, 40.0)


# ---- GPM -----------------------------------------------------------------------------------------


GPM = ("0 set gpm.sm_active 72", "0 set gpm.sm_occupancy 35", "0 set gpm.tensor 41",
       "0 set gpm.dram 28")  # fmt: skip


def test_gpm_needs_two_samples_then_reads_every_metric(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, *GPM)
    first = gpu(c)
    assert (first.sm_active_pct, first.tensor_active_pct) == (None, None)  # no previous sample
    clock.advance(1.0)
    g = gpu(c)
    assert (g.sm_active_pct, g.sm_occupancy_pct, g.tensor_active_pct, g.dram_active_pct) == (
        72.0, 35.0, 41.0, 28.0)  # fmt: skip
    assert fake_nvml.gpm_samples_live() == 2  # allocated once, reused every tick
    c.close()
    assert fake_nvml.gpm_samples_live() == 0


def test_gpm_not_supported_is_not_asked_again(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, "0 preset rtx3090", "0 error nvmlGpmSampleGet 999")
    gpu(c)
    clock.advance(1.0)
    g = gpu(c)
    # the support query said no: no sample was allocated or asked for (else the injected error
    # would show), and the device is not asked again
    assert (g.sm_active_pct, g.error) == (None, None)
    assert fake_nvml.gpm_samples_live() == 0 and c._gpus[0].activity.gpm.off


def test_gpm_sample_error_is_not_supported_forever(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, *GPM, "0 error nvmlGpmSampleGet 3")
    gpu(c)
    clock.advance(1.0)
    assert gpu(c).sm_active_pct is None
    assert "gpm_sample" in c._gpus[0].unsupported


def test_gpm_absent_on_an_old_driver(fake_nvml_old, old_clock) -> None:
    c = collector(fake_nvml_old, old_clock, *GPM)
    gpu(c)
    old_clock.advance(1.0)
    g = gpu(c)
    assert (g.sm_active_pct, g.error) == (None, None)
    assert "gpm" in c._gpus[0].unsupported  # FUNCTION_NOT_FOUND: never asked again


def test_gpu_lost_frees_the_gpm_samples(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, *GPM)
    gpu(c)
    assert fake_nvml.gpm_samples_live() == 2
    fake_nvml.directive("0 lost")
    clock.advance(1.0)
    assert gpu(c).lost
    assert fake_nvml.gpm_samples_live() == 0


def test_gpm_metric_out_of_range_reads_unknown(fake_nvml, clock) -> None:
    c = collector(fake_nvml, clock, *GPM, "0 set gpm.tensor 250")
    gpu(c)
    clock.advance(1.0)
    g = gpu(c)
    assert (g.sm_active_pct, g.tensor_active_pct) == (72.0, None)


def test_h100x8_scenario_fills_everything(fake_nvml, clock) -> None:
    fake_nvml.load("h100x8_throttle.txt")
    fake_nvml.set_time(0.0)
    c = GpuCollector(pynvml, clock=clock)
    c.collect()
    clock.advance(1.0)
    gpus, _ = c.collect()
    assert all(g.sm_active_pct is not None and g.util_gpu_mean_pct is not None for g in gpus)
    assert gpus[3].processes[0].sm_util_pct == 84.0
    c.close()
    assert fake_nvml.gpm_samples_live() == 0


def test_unscripted_fake_gives_the_first_compute_process_the_device_utilization(
    fake_nvml, clock
) -> None:
    c = collector(fake_nvml, clock, "0 set util.gpu 64", "0 set util.mem 22",
                  f"0 proc {PID} 1073741824", "0 proc 41300 1048576 G")  # fmt: skip
    procs = {p.pid: (p.sm_util_pct, p.mem_util_pct) for p in gpu(c).processes}
    assert procs == {PID: (64.0, 22.0), 41300: (0.0, 0.0)}
