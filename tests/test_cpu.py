"""CPU, memory and host collectors against a scripted fake psutil."""

from collections import namedtuple
from types import SimpleNamespace

import pytest

from collectors.cpu import FREQ_TTL_S, TOTAL_INDEX, CpuCollector
from collectors.host import HostCollector
from collectors.memory import MemoryCollector

Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")
Freq = namedtuple("Freq", "current min max")
VMem = namedtuple("VMem", "total available used cached")
Swap = namedtuple("Swap", "total used sin sout")


def _times(user, idle):
    return Times(user, 0.0, 0.0, idle, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


class FakeCpuPs:
    """Two cores whose cumulative times advance by whatever the test scripts."""

    def __init__(self, freqs=None, loadavg=(1.0, 0.5, 0.25)):
        self.cores = [_times(0, 0), _times(0, 0)]
        self.freqs = freqs
        self.loadavg = loadavg

    def cpu_count(self, logical=True):
        return 2 if logical else 1

    def cpu_times(self, percpu=False):
        if percpu:
            return list(self.cores)
        return _times(sum(c.user for c in self.cores), sum(c.idle for c in self.cores))

    def cpu_freq(self, percpu=False):
        if self.freqs is None:
            raise NotImplementedError
        return self.freqs

    def getloadavg(self):
        if self.loadavg is None:
            raise OSError("no load average")
        return self.loadavg


def test_first_collect_has_no_percentages_then_deltas():
    ps = FakeCpuPs(freqs=[Freq(2000.0, 0, 3000.0), Freq(1000.0, 0, 3000.0)])
    collector = CpuCollector(ps=ps)
    first = collector.collect()
    assert [c.busy_pct for c in first.cores] == [None, None]
    ps.cores = [_times(75, 25), _times(0, 100)]
    snap = collector.collect()
    assert [c.busy_pct for c in snap.cores] == [75.0, 0.0]
    assert snap.total.busy_pct == pytest.approx(37.5)
    assert snap.total.index == TOTAL_INDEX
    assert [c.freq_mhz for c in snap.cores] == [2000.0, 1000.0]
    assert (snap.freq_mhz, snap.freq_max_mhz) == (1500.0, 3000.0)
    assert snap.load_avg == (1.0, 0.5, 0.25)
    assert snap.physical_cores == 1


def test_missing_frequency_and_load_are_none_not_zero():
    ps = FakeCpuPs(freqs=None, loadavg=None)
    snap = CpuCollector(ps=ps).collect()
    assert (snap.freq_mhz, snap.freq_max_mhz, snap.load_avg) == (None, None, None)
    assert snap.cores[0].freq_mhz is None


def test_zero_max_frequency_means_unknown():
    ps = FakeCpuPs(freqs=[Freq(2596.0, 0.0, 0.0)])
    snap = CpuCollector(ps=ps).collect()
    assert snap.freq_max_mhz is None
    assert [c.freq_mhz for c in snap.cores] == [2596.0, None]


def test_frequencies_are_reread_only_when_stale():
    now = [0.0]
    ps = FakeCpuPs(freqs=[Freq(2000.0, 0, 3000.0), Freq(2000.0, 0, 3000.0)])
    collector = CpuCollector(ps=ps, clock=lambda: now[0])
    collector.collect()
    ps.freqs = [Freq(1000.0, 0, 3000.0), Freq(1000.0, 0, 3000.0)]
    now[0] = FREQ_TTL_S / 2
    assert collector.collect().freq_mhz == 2000.0
    now[0] = FREQ_TTL_S
    assert collector.collect().freq_mhz == 1000.0


class FakeMemPs:
    def __init__(self):
        self.swap = Swap(100, 10, 0, 0)

    def virtual_memory(self):
        return VMem(total=1000, available=600, used=300, cached=50)

    def swap_memory(self):
        return self.swap


def test_memory_swap_rates_from_sin_sout_deltas():
    ps, now = FakeMemPs(), [0.0]
    collector = MemoryCollector(ps=ps, clock=lambda: now[0])
    first = collector.collect()
    assert (first.swap_in_bytes_per_s, first.swap_out_bytes_per_s) == (None, None)
    ps.swap, now[0] = Swap(100, 10, 4096, 8192), 2.0
    snap = collector.collect()
    assert (snap.swap_in_bytes_per_s, snap.swap_out_bytes_per_s) == (2048.0, 4096.0)
    assert (snap.total_bytes, snap.available_bytes, snap.cached_bytes) == (1000, 600, 50)


def test_memory_without_cached_field():
    ps = FakeMemPs()
    ps.virtual_memory = lambda: SimpleNamespace(total=1, available=1, used=0)
    assert MemoryCollector(ps=ps).collect().cached_bytes is None


def test_host_uptime_from_boot_time():
    ps = SimpleNamespace(boot_time=lambda: 1000.0, cpu_count=lambda logical=True: 8)
    info = HostCollector(ps=ps, wall=lambda: 1600.0, hostname=lambda: "gpu-node-1").collect()
    assert (info.hostname, info.uptime_s, info.logical_cpus) == ("gpu-node-1", 600.0, 8)
