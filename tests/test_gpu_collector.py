"""GpuCollector against the compiled fake NVML, in-process through the real pynvml."""

from __future__ import annotations

import pynvml
import pytest

from traintop.collectors.gpu import INIT_RETRY_S, GpuCollector
from traintop.collectors.snapshot import GpuProcess

MIB = 1 << 20


class Clock:
    """A settable monotonic clock shared by the collector and the fake."""

    def __init__(self, fake) -> None:
        self.fake, self.now = fake, 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.fake.set_time(self.now)


@pytest.fixture
def clock(fake_nvml) -> Clock:
    return Clock(fake_nvml)


@pytest.fixture
def old_clock(fake_nvml_old) -> Clock:
    return Clock(fake_nvml_old)


def collector_for(fake, clock: Clock, scenario: str | None = None) -> GpuCollector:
    if scenario:
        fake.load(scenario)
    fake.set_time(clock.now)
    return GpuCollector(pynvml, clock=clock)


def test_h100_readings_exact(fake_nvml, clock) -> None:
    gpus, status = collector_for(fake_nvml, clock, "h100x8_throttle.txt").collect()
    assert (status.available, status.driver_version, status.cuda_driver_version) == (
        True,
        "590.48.01",
        "13.1",
    )
    assert len(gpus) == 8
    hot = gpus[3]
    assert (hot.index, hot.name, hot.pci_bus_id) == (3, "NVIDIA H100 80GB HBM3", "00000000:48:00.0")
    assert hot.uuid == "GPU-7f3a9c2e-5b1d-4e8f-a6c0-0000d15ea5e3"
    assert (hot.util_gpu_pct, hot.util_mem_pct) == (95.0, 41.0)
    assert (hot.mem_total_bytes, hot.mem_used_bytes) == (81559 * MIB, 70000 * MIB)
    assert hot.mem_reserved_bytes == 479 * MIB
    assert hot.mem_free_bytes == (81559 - 479 - 70000) * MIB
    assert (hot.temp_c, hot.temp_shutdown_c, hot.temp_slowdown_c) == (84.0, 92.0, 89.0)
    assert hot.temp_max_operating_c == 87.0
    assert (hot.power_w, hot.power_limit_w) == (512.0, 700.0)
    assert (hot.sm_clock_mhz, hot.sm_clock_max_mhz) == (1410, 1980)
    assert (hot.mem_clock_mhz, hot.mem_clock_max_mhz) == (2619, 2619)
    assert (hot.pstate, hot.fan_pct, hot.mig_mode) == (0, None, False)
    assert (hot.clocks_event_reasons, hot.clocks_event_reasons_supported) == (0x28, 0x1FF)
    assert hot.processes == (
        GpuProcess(41203, 52000 * MIB, "C", 84.0, 38.0),
        GpuProcess(41303, 18000 * MIB, "C", 3.0, 1.0),
    )
    assert (hot.util_gpu_mean_pct, hot.sm_active_pct, hot.tensor_active_pct) == (95.0, None, None)
    assert (gpus[5].power_w, gpus[5].clocks_event_reasons) == (699.0, 0x4)
    assert (gpus[0].power_w, gpus[0].temp_c, gpus[0].lost, gpus[0].error) == (
        631.95,
        63.0,
        False,
        None,
    )


def test_mig_gpu_has_no_utilization(fake_nvml, clock) -> None:
    gpus, _ = collector_for(fake_nvml, clock, "a100_mig.txt").collect()
    assert (gpus[0].name, gpus[0].mig_mode) == ("NVIDIA A100-SXM4-80GB", True)
    assert (gpus[0].util_gpu_pct, gpus[0].util_mem_pct) == (None, None)
    assert gpus[0].mem_total_bytes == 81920 * MIB
    assert (gpus[1].mig_mode, gpus[1].util_gpu_pct) == (False, 88.0)


def test_idle_3090_and_not_supported_fields(fake_nvml, clock) -> None:
    gpus, _ = collector_for(fake_nvml, clock, "mixed_errors.txt").collect()
    idle = gpus[0]
    assert idle.sm_clock_mhz == 0  # a real 0 MHz in P8, not "unavailable"
    assert (idle.pstate, idle.fan_pct, idle.mem_clock_mhz) == (8, 0.0, 405)
    # the 3090 answers the older per-process call; no process ran a kernel (NOT_FOUND): 0 %
    assert idle.processes == (GpuProcess(2213, 230 * MIB, "G", 0.0, 0.0),)
    broken = gpus[2]
    assert (broken.power_w, broken.power_limit_w, broken.pstate) == (None, None, None)


def test_pcie_rate_none_then_counter_delta(fake_nvml, clock) -> None:
    collector = collector_for(fake_nvml, clock, "h100x8_throttle.txt")
    first, _ = collector.collect()
    assert (first[0].pcie_rx_bytes_per_s, first[0].pcie_tx_bytes_per_s) == (None, None)
    clock.advance(2.0)
    second, _ = collector.collect()
    assert second[0].pcie_rx_bytes_per_s == pytest.approx(2.4e9)
    assert second[0].pcie_tx_bytes_per_s == pytest.approx(8.5e8)


def test_pcie_not_supported_stays_none(fake_nvml, clock) -> None:
    collector = collector_for(fake_nvml, clock, "mixed_errors.txt")
    collector.collect()
    clock.advance(1.0)
    gpus, _ = collector.collect()
    assert gpus[2].pcie_rx_bytes_per_s is None
    assert gpus[1].pcie_rx_bytes_per_s == pytest.approx(1e6, rel=1e-3)  # KB/s, the first interval


def test_gpu_lost_mid_run_keeps_identity_and_others_go_on(fake_nvml, clock) -> None:
    collector = collector_for(fake_nvml, clock, "h100x8_throttle.txt")
    collector.collect()
    fake_nvml.directive("2 lost")
    gpus, status = collector.collect()
    assert status.available
    lost = gpus[2]
    assert (lost.lost, lost.name, lost.error) == (True, "NVIDIA H100 80GB HBM3", "GPU is lost")
    assert lost.uuid == "GPU-7f3a9c2e-5b1d-4e8f-a6c0-0000d15ea5e2"
    assert lost.power_w is None
    assert [g.lost for g in gpus].count(True) == 1
    assert gpus[3].temp_c == 84.0
    calls = fake_nvml.calls(2)
    again, _ = collector.collect()
    assert again[2].lost and fake_nvml.calls(2) == calls  # a lost GPU is not polled again


def test_gpu_lost_after_n_calls_and_from_get_handle(fake_nvml, clock) -> None:
    fake_nvml.directive("devices 2", "0 lose_after_calls 30", "1 lost")
    fake_nvml.set_time(0.0)
    collector = GpuCollector(pynvml, clock=clock)
    gpus, _ = collector.collect()
    assert (gpus[1].lost, gpus[1].name) == (True, None)  # lost already at GetHandleByIndex
    assert gpus[0].lost is False
    gpus, _ = collector.collect()
    assert gpus[0].lost and gpus[0].name == "NVIDIA H100 80GB HBM3"


def test_unsupported_metric_is_not_asked_again(fake_nvml, clock) -> None:
    collector = collector_for(fake_nvml, clock)
    assert collector.collect()[0][0].fan_pct is None  # SXM H100: NOT_SUPPORTED
    fake_nvml.directive("0 set fan 40", "0 error nvmlDeviceGetPerformanceState 26")
    gpus, _ = collector.collect()
    assert gpus[0].fan_pct is None
    assert gpus[0].pstate is None  # DEPRECATED answer: given up too
    fake_nvml.directive("0 error nvmlDeviceGetPerformanceState 0")
    assert collector.collect()[0][0].pstate is None


def test_transient_error_is_reported_and_retried(fake_nvml, clock) -> None:
    collector = collector_for(fake_nvml, clock)
    fake_nvml.directive("0 error nvmlDeviceGetPowerUsage 999")
    gpus, _ = collector.collect()
    assert gpus[0].power_w is None
    assert gpus[0].error == "power: Unknown Error"
    fake_nvml.directive("0 error nvmlDeviceGetPowerUsage 0")
    gpus, _ = collector.collect()
    assert (gpus[0].power_w, gpus[0].error) == (69.85, None)


def test_old_driver_falls_back(fake_nvml_old, old_clock) -> None:
    fake_nvml_old.directive("0 set mem.used 1048576000", "0 proc 77 1048576000 C")
    fake_nvml_old.set_time(0.0)
    gpus, status = GpuCollector(pynvml, clock=old_clock).collect()
    gpu = gpus[0]
    assert status.available
    assert gpu.temp_c == 41.0  # nvmlDeviceGetTemperatureV missing -> nvmlDeviceGetTemperature
    assert gpu.mem_reserved_bytes is None  # v1 memory: used includes the reserved part
    assert gpu.mem_used_bytes == 1048576000 + 479 * MIB
    assert gpu.clocks_event_reasons == 0x1  # via the deprecated ...ThrottleReasons
    assert gpu.clocks_event_reasons_supported == 0x1FF
    assert gpu.processes == (GpuProcess(77, 1048576000, "C"),)  # _v3 missing -> _v2


class OlderBindings:
    """pynvml as an older nvidia-ml-py (12.560, the floor) that lacks the newer wrappers."""

    MISSING = ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetCurrentClocksEventReasons")

    def __getattr__(self, name: str):
        if name in self.MISSING:
            raise AttributeError(name)
        return getattr(pynvml, name)


def test_bindings_without_a_newer_wrapper_fall_back(fake_nvml, clock) -> None:
    fake_nvml.set_time(clock.now)
    (gpu,), _ = GpuCollector(OlderBindings(), clock=clock).collect()
    assert gpu.temp_c == 41.0  # through nvmlDeviceGetTemperature
    assert gpu.clocks_event_reasons == 0x1  # through ...ThrottleReasons
    assert gpu.error is None


def test_gpu_count_changes(fake_nvml, clock) -> None:
    collector = collector_for(fake_nvml, clock, "h100x8_throttle.txt")
    assert len(collector.collect()[0]) == 8
    fake_nvml.directive("count 7")
    gpus, _ = collector.collect()
    assert [g.index for g in gpus] == list(range(7))
    fake_nvml.directive("count 0")
    assert collector.collect()[0] == ()
    fake_nvml.directive("count 8")
    assert collector.collect()[0][3].temp_c == 84.0


def test_no_gpus(fake_nvml, clock) -> None:
    gpus, status = collector_for(fake_nvml, clock, "nogpu.txt").collect()
    assert (gpus, status.available) == ((), True)


def test_library_missing_gives_status_not_exception(fake_nvml, clock, monkeypatch) -> None:
    fake_nvml.uninstall(pynvml)

    def no_library(name: str) -> None:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(pynvml, "CDLL", no_library)
    gpus, status = GpuCollector(pynvml, clock=clock).collect()
    assert (gpus, status.available, status.message) == ((), False, "NVML library not found")


def test_driver_not_loaded_then_appears_after_retry(fake_nvml, clock) -> None:
    fake_nvml.directive("error nvmlInitWithFlags 9")
    collector = GpuCollector(pynvml, clock=clock)
    gpus, status = collector.collect()
    assert (gpus, status.available, status.message) == ((), False, "NVIDIA driver not loaded")
    fake_nvml.directive("error nvmlInitWithFlags 0")
    clock.advance(INIT_RETRY_S / 2)
    assert collector.collect()[1].available is False  # no retry storm
    clock.advance(INIT_RETRY_S / 2)
    gpus, status = collector.collect()
    assert status.available and len(gpus) == 1


def test_driver_vanishing_after_init(fake_nvml, clock) -> None:
    collector = collector_for(fake_nvml, clock)
    collector.collect()
    fake_nvml.directive("error nvmlDeviceGetCount_v2 9")
    gpus, status = collector.collect()
    assert (gpus, status.message) == ((), "NVIDIA driver not loaded")
    assert fake_nvml.init_refcount() == 0


def test_close_releases_nvml(fake_nvml, clock) -> None:
    collector = collector_for(fake_nvml, clock)
    collector.collect()
    assert fake_nvml.init_refcount() == 1
    collector.close()
    collector.close()
    assert fake_nvml.init_refcount() == 0


def test_default_nvml_module_is_pynvml(fake_nvml) -> None:
    gpus, status = GpuCollector().collect()
    assert status.available and gpus[0].name == "NVIDIA H100 80GB HBM3"


def test_a_copy_that_laps_the_32_bit_counters_reads_nvml_s_own_measurement(
    fake_nvml, clock
) -> None:
    """An H100's PCIe byte counters are 32-bit: at 55 GB/s they wrap 12 times a second, and
    their increase between ticks says nothing; the collector reads the link's throughput."""
    collector = collector_for(fake_nvml, clock)
    fake_nvml.directive("0 set pcie.rx_rate 55000000000", "0 set pcie.tx_rate 120000000")
    readings = []
    for _ in range(6):
        gpus, _ = collector.collect()
        readings.append((gpus[0].pcie_rx_bytes_per_s, gpus[0].pcie_tx_bytes_per_s))
        clock.advance(1.0)
    assert readings[0] == (None, None)
    for rx, tx in readings[1:]:
        assert rx == pytest.approx(55e9, rel=1e-4) and tx == pytest.approx(1.2e8, rel=1e-4)


def test_a_32_bit_counter_that_wraps_once_between_ticks_reads_its_increase(
    fake_nvml, clock
) -> None:
    collector = collector_for(fake_nvml, clock)
    fake_nvml.directive("0 set pcie.rx_rate 300000000")
    clock.advance(12.0)  # 3.6 GB: the counter wraps (at 4.29 GB) between the last two ticks
    rates = []
    for _ in range(4):
        gpus, _ = collector.collect()
        rates.append(gpus[0].pcie_rx_bytes_per_s)
        clock.advance(1.0)
    assert rates[0] is None and rates[1:] == [pytest.approx(3e8, rel=1e-4)] * 3


def test_without_nvml_s_measurement_a_lapped_counter_gives_no_figure(fake_nvml, clock) -> None:
    collector = collector_for(fake_nvml, clock)
    fake_nvml.directive("0 set pcie.rx_rate 55000000000", "0 error nvmlDeviceGetPcieThroughput 3")
    collector.collect()
    clock.advance(1.0)
    gpus, _ = collector.collect()
    assert gpus[0].pcie_rx_bytes_per_s is None  # not a lapped 3 GB/s
