"""Disk collector: physical-disk filtering from a fake /sys/block, iostat-style rates."""

import os
from collections import namedtuple

import psutil
import pytest

from traintop.collectors.disks import DiskClassifier, DiskCollector, DiskStats

Io = namedtuple(
    "Io", "read_count write_count read_bytes write_bytes read_time write_time busy_time"
)
IDLE = Io(0, 0, 0, 0, 0, 0, 0)


@pytest.fixture
def sys_block(tmp_path):
    """sda and nvme0n1 are hardware; loop0, dm-0, zram0 and md0 are not."""
    for name in ("sda", "nvme0n1"):
        (tmp_path / name / "device").mkdir(parents=True)
    for name in ("loop0", "dm-0", "zram0", "md0"):
        (tmp_path / name).mkdir()
    return tmp_path


class FakeDiskPs:
    def __init__(self, counters):
        self.counters = counters

    def disk_io_counters(self, perdisk=False):
        return dict(self.counters)


NAMES = ("sda", "sda1", "nvme0n1", "nvme0n1p1", "loop0", "dm-0", "zram0", "md0")


@pytest.mark.parametrize(
    ("include_virtual", "shown"),
    [(False, ["nvme0n1", "sda"]), (True, ["dm-0", "loop0", "md0", "nvme0n1", "sda", "zram0"])],
)
def test_only_whole_disks_are_shown(sys_block, include_virtual, shown):
    ps = FakeDiskPs(dict.fromkeys(NAMES, IDLE))
    collector = DiskCollector(
        ps=ps, include_virtual=include_virtual, classifier=DiskClassifier(sys_block)
    )
    assert [d.name for d in collector.collect()] == shown


@pytest.mark.parametrize(
    ("name", "whole"),
    [("sda", True), ("sda1", False), ("nvme0n1p2", False), ("mmcblk0p1", False), ("vdb", True)],
)
def test_fallback_without_sysfs_recognises_partitions(tmp_path, name, whole):
    assert DiskClassifier(tmp_path / "missing").classify(name)[0] is whole


def test_rates_busy_and_await(sys_block):
    now = [0.0]
    ps = FakeDiskPs({"sda": IDLE})
    collector = DiskCollector(ps=ps, clock=lambda: now[0], classifier=DiskClassifier(sys_block))
    first = collector.collect()[0]
    assert first.read_bytes_per_s is None and first.busy_pct is None
    ps.counters = {"sda": Io(100, 50, 4 << 20, 2 << 20, 300, 150, 500)}
    now[0] = 2.0
    disk = collector.collect()[0]
    assert (disk.read_bytes_per_s, disk.write_bytes_per_s) == (2_097_150, 1_048_580)  # 6 digits
    assert (disk.read_iops, disk.write_iops) == (50.0, 25.0)
    assert disk.busy_pct == pytest.approx(25.0)
    assert disk.await_ms == pytest.approx(3.0)


def test_idle_disk_has_no_await_and_new_disk_has_no_rates(sys_block):
    now = [0.0]
    ps = FakeDiskPs({"sda": IDLE})
    collector = DiskCollector(ps=ps, clock=lambda: now[0], classifier=DiskClassifier(sys_block))
    collector.collect()
    ps.counters, now[0] = {"sda": IDLE, "nvme0n1": IDLE}, 1.0
    sda, nvme = sorted(collector.collect(), key=lambda d: d.name, reverse=True)
    assert (sda.busy_pct, sda.await_ms) == (0.0, None)
    assert nvme.read_bytes_per_s is None


def test_real_psutil_smoke():
    collector = DiskCollector()
    collector.collect()
    for disk in collector.collect():
        assert disk.busy_pct is None or 0.0 <= disk.busy_pct <= 100.0
        assert not disk.name.startswith(("loop", "ram", "zram", "dm-"))


DISKSTATS = """   8       0 sda 100 2 800 30 50 4 400 20 0 40 50 0 0 0 0 9 1
   8       1 sda1 90 700 40 300
 259       0 nvme0n1 10 0 80 3 5 0 40 2 0 4 5 0 0 0 0 0 0 0 0
   7       0 loop0 1 0 8 0 0 0 0 0 0 0 0
   9       0 md0 what is this
"""


def test_diskstats_gives_psutil_counters_per_device(tmp_path):
    path = tmp_path / "diskstats"
    path.write_text(DISKSTATS)
    found = DiskStats(str(path)).read()
    assert list(found) == ["sda", "sda1", "nvme0n1", "loop0"]  # an unknown layout is skipped
    sda = found["sda"]
    assert (sda.read_count, sda.write_count) == (100, 50)
    assert (sda.read_bytes, sda.write_bytes) == (800 * 512, 400 * 512)
    assert (sda.read_time, sda.write_time, sda.busy_time) == (30, 20, 40)
    assert (sda.read_merged_count, sda.write_merged_count) == (2, 4)
    assert found["sda1"] == (90, 40, 700 * 512, 300 * 512, 0, 0, 0, 0, 0)


@pytest.mark.skipif(not os.path.exists("/proc/diskstats"), reason="needs Linux /proc")
def test_diskstats_matches_psutil():
    mine, reference = DiskStats().read(), psutil.disk_io_counters(perdisk=True)
    assert mine.keys() == reference.keys()
    for name, counters in mine.items():
        assert counters._fields == reference[name]._fields
        assert 0 <= reference[name].read_count - counters.read_count < 1000
