"""CPU, memory and host collectors against a scripted fake psutil."""

import os
from collections import namedtuple
from types import SimpleNamespace

import psutil
import pytest

from traintop.collectors.cpu import CPU_FIELDS, FREQ_TTL_S, TOTAL_INDEX, CpuCollector, ProcStat
from traintop.collectors.host import HostCollector
from traintop.collectors.memory import MemInfo, MemoryCollector

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


# ---- Linux: /proc/stat and /proc/meminfo read straight, with psutil's figures -------------

PROC_STAT = """cpu  1000 20 300 5000 40 0 6 7 0 0
cpu0 600 10 200 2000 30 0 4 5 0 0
cpu1 400 10 100 3000 10 0 2 2 0 0
intr 123 4 5
ctxt 999
"""


def test_proc_stat_gives_psutil_cpu_times_in_one_read(tmp_path):
    path = tmp_path / "stat"
    path.write_text(PROC_STAT)
    total, cores = ProcStat(str(path)).read()
    tick = os.sysconf("SC_CLK_TCK")
    assert total._fields == CPU_FIELDS
    assert (total.user, total.idle, total.steal) == (1000 / tick, 5000 / tick, 7 / tick)
    assert [core.user for core in cores] == [600 / tick, 400 / tick]


def test_proc_stat_of_an_old_kernel_has_fewer_fields(tmp_path):
    path = tmp_path / "stat"
    path.write_text("cpu  1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7\n")
    total, (core,) = ProcStat(str(path)).read()
    assert total._fields == core._fields == CPU_FIELDS[:7]


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux /proc")
def test_proc_stat_matches_psutil():
    collector = CpuCollector()
    total, cores = collector._times()
    assert type(total)._fields == psutil.cpu_times()._fields
    assert len(cores) == len(psutil.cpu_times(percpu=True))
    assert 0 <= psutil.cpu_times().user - total.user < 1.0


MEMINFO = """MemTotal:       16000000 kB
MemFree:         1000000 kB
MemAvailable:    9000000 kB
Buffers:          100000 kB
Cached:          5000000 kB
SwapCached:          100 kB
SReclaimable:     300000 kB
SwapTotal:       2000000 kB
SwapFree:        1500000 kB
HugePages_Total:       0
"""


def _meminfo(tmp_path, text, vmstat="nr_free_pages 12\npswpin 3\npswpout 5\n"):
    (tmp_path / "meminfo").write_text(text)
    (tmp_path / "vmstat").write_text(vmstat)
    return MemInfo(str(tmp_path / "meminfo"), str(tmp_path / "vmstat"))


def test_meminfo_gives_psutil_figures(tmp_path):
    vm, swap = _meminfo(tmp_path, MEMINFO).read()
    assert (vm.total, vm.available, vm.used) == (16000000 * 1024, 9000000 * 1024, 7000000 * 1024)
    assert vm.cached == (5000000 + 300000) * 1024  # as `free` (and psutil) count the cache
    assert (swap.total, swap.used) == (2000000 * 1024, 500000 * 1024)
    assert (swap.sin, swap.sout) == (3 * 4096, 5 * 4096)


def test_meminfo_in_a_container_that_overstates_available_shows_free(tmp_path):
    vm, _ = _meminfo(tmp_path, MEMINFO.replace("9000000", "99000000")).read()
    assert vm.available == 1000000 * 1024


def test_meminfo_without_available_or_swap_lines_is_left_to_psutil(tmp_path, monkeypatch):
    """psutil estimates those (zoneinfo, sysinfo): the collector asks it then."""
    assert _meminfo(tmp_path, MEMINFO.replace("MemAvailable", "Other")).read() is None
    assert _meminfo(tmp_path, MEMINFO.replace("9000000", "0")).read() is None  # a kernel bug
    assert _meminfo(tmp_path, MEMINFO.replace("SwapFree", "Other")).read() is None
    collector = MemoryCollector()
    collector._meminfo = _meminfo(tmp_path, MEMINFO.replace("MemAvailable", "Other"))
    monkeypatch.setattr(psutil, "virtual_memory", lambda: VMem(10, 6, 3, 1))
    monkeypatch.setattr(psutil, "swap_memory", lambda: Swap(4, 2, 0, 0))
    snap = collector.collect()
    assert (snap.total_bytes, snap.available_bytes, snap.swap_used_bytes) == (10, 6, 2)


def test_vmstat_without_swap_counters_counts_zero(tmp_path):
    _, swap = _meminfo(tmp_path, MEMINFO, vmstat="nr_free_pages 12\n").read()
    assert (swap.sin, swap.sout) == (0, 0)


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="needs Linux /proc")
def test_meminfo_matches_psutil():
    vm, swap = MemInfo().read() or (psutil.virtual_memory(), psutil.swap_memory())
    reference = psutil.virtual_memory()
    assert vm.total == reference.total
    assert abs(vm.available - reference.available) < 64 << 20
    assert swap.total == psutil.swap_memory().total
