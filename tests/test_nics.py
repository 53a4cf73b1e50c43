"""NIC collector: loopback/virtual filtering, rates, link utilization."""

import os
from collections import namedtuple

import psutil
import pytest

from traintop.collectors.nics import LINK_FACTS_TTL_S, NetDev, NicCollector, link_util_pct

Net = namedtuple(
    "Net",
    "bytes_sent bytes_recv packets_sent packets_recv errin errout dropin dropout",
)
Stats = namedtuple("Stats", "isup duplex speed mtu flags")
ZERO = Net(0, 0, 0, 0, 0, 0, 0, 0)
UP = Stats(True, 2, 10000, 1500, "up,broadcast,running,multicast")


class FakeNetPs:
    def __init__(self, counters, stats):
        self.counters, self.stats = counters, stats

    def net_io_counters(self, pernic=False):
        return dict(self.counters)

    def net_if_stats(self):
        self.stats_reads = getattr(self, "stats_reads", 0) + 1
        return dict(self.stats)


NICS = {"lo": ZERO, "eth0": ZERO, "veth12ab": ZERO, "docker0": ZERO, "ib0": ZERO}
STATS = {
    "lo": Stats(True, 0, 0, 65536, "up,loopback,running"),
    "eth0": UP,
    "veth12ab": UP,
    "docker0": UP,
    "ib0": UP,
}


@pytest.mark.parametrize(
    ("kwargs", "shown"),
    [
        ({}, ["eth0", "ib0"]),
        ({"include_loopback": True}, ["eth0", "ib0", "lo"]),
        ({"include_virtual": True}, ["docker0", "eth0", "ib0", "veth12ab"]),
    ],
)
def test_filters(kwargs, shown):
    collector = NicCollector(ps=FakeNetPs(NICS, STATS), **kwargs)
    assert [n.name for n in collector.collect()] == shown


def test_rates_and_link_utilization():
    now = [0.0]
    ps = FakeNetPs({"eth0": ZERO}, {"eth0": UP})
    collector = NicCollector(ps=ps, clock=lambda: now[0])
    first = collector.collect()[0]
    assert (first.rx_bytes_per_s, first.link_util_pct, first.speed_mbps) == (None, None, 10000)
    ps.counters, now[0] = {"eth0": Net(125_000_000, 250_000_000, 10, 20, 1, 1, 2, 0)}, 0.5
    nic = collector.collect()[0]
    assert (nic.rx_bytes_per_s, nic.tx_bytes_per_s) == (500e6, 250e6)
    assert (nic.rx_packets_per_s, nic.tx_packets_per_s) == (40.0, 20.0)
    assert (nic.errors_per_s, nic.drops_per_s) == (4.0, 4.0)
    assert nic.link_util_pct == pytest.approx(40.0)
    assert nic.is_up


def test_unknown_speed_and_missing_stats():
    ps = FakeNetPs({"eth0": ZERO, "wg0": ZERO}, {"eth0": UP._replace(speed=0)})
    eth0, wg0 = NicCollector(ps=ps).collect()
    assert eth0.speed_mbps is None
    assert (wg0.is_up, wg0.speed_mbps) == (False, None)


def test_link_facts_reused_until_stale_or_a_nic_appears():
    now = [0.0]
    ps = FakeNetPs({"eth0": ZERO}, {"eth0": UP})
    collector = NicCollector(ps=ps, clock=lambda: now[0])
    collector.collect()
    ps.stats = {"eth0": UP._replace(isup=False)}
    now[0] = LINK_FACTS_TTL_S / 2
    assert collector.collect()[0].is_up and ps.stats_reads == 1
    now[0] = LINK_FACTS_TTL_S
    assert not collector.collect()[0].is_up and ps.stats_reads == 2
    ps.counters, ps.stats = {"eth0": ZERO, "ib0": ZERO}, {"eth0": UP, "ib0": UP}
    now[0] += 1.0
    assert [n.speed_mbps for n in collector.collect()] == [10000, 10000]
    assert ps.stats_reads == 3


@pytest.mark.parametrize(
    ("rx", "tx", "speed", "expected"),
    [
        (125e6, 0.0, 1000, 100.0),
        (0.0, 12.5e6, 1000, 10.0),
        (1.0, 1.0, None, None),
        (None, 1, 1, None),
    ],
)
def test_link_util_pct(rx, tx, speed, expected):
    assert link_util_pct(rx, tx, speed) == expected


def test_real_psutil_smoke():
    collector = NicCollector()
    collector.collect()
    names = [nic.name for nic in collector.collect()]
    assert "lo" not in names


NET_DEV = """Inter-|   Receive  |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop ...
    lo:     100   2 0 0 0 0 0 0      100  2 0 0 0 0 0 0
  eth0:12345678901   30 1 2 0 0 0 0     5000 40 3 4 0 0 0 0
"""


def test_net_dev_gives_psutil_counters_per_nic(tmp_path):
    path = tmp_path / "dev"
    path.write_text(NET_DEV)
    eth0 = NetDev(str(path)).read()["eth0"]
    assert eth0 == Net(5000, 12345678901, 40, 30, 1, 3, 2, 4)  # psutil's field order
    assert eth0._fields == Net._fields


@pytest.mark.skipif(not os.path.exists("/proc/net/dev"), reason="needs Linux /proc")
def test_net_dev_matches_psutil():
    mine, reference = NetDev().read(), psutil.net_io_counters(pernic=True)
    assert mine.keys() == reference.keys()
    assert all(0 <= reference[n].packets_recv - mine[n].packets_recv < 1000 for n in mine)
