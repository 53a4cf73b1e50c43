"""NIC counters from the jobs' own network namespaces (traintop.collectors.job_nics).

Most tests point the collector at a fake /proc tree (ns/net links, net/dev, the job's sysfs seen
through /proc/PID/root); one runs a real process in a real network namespace, sends bytes over
its loopback and reads them from outside, as the monitor does.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.job_fixtures import data_bound_job
from traintop.collectors.job_nics import JobNicCollector, netns_inode, parse_net_dev
from traintop.collectors.sampler import Collectors, Sampler
from traintop.collectors.snapshot import HostInfo, NicSnapshot

HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
    "drop fifo colls carrier compressed\n"
)
OWN_NS, JOB_NS = 4026531840, 4026532999


def net_dev(**ifaces: tuple[int, int, int, int]) -> str:
    """``/proc/net/dev`` text; per interface (rx bytes, rx packets, tx bytes, tx packets)."""
    lines = [
        f"{name:>6}:{rxb} {rxp} 1 2 0 0 0 0 {txb} {txp} 3 4 0 0 0 0\n"
        for name, (rxb, rxp, txb, txp) in ifaces.items()
    ]
    return HEADER + "".join(lines)


class FakeProc:
    """A /proc tree: the monitor's netns, and per pid its netns, net/dev and (maybe) sysfs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._link("self", OWN_NS)

    def _link(self, pid: int | str, inode: int) -> None:
        (self.root / str(pid) / "ns").mkdir(parents=True, exist_ok=True)
        os.symlink(f"net:[{inode}]", self.root / str(pid) / "ns" / "net")

    def process(self, pid: int, inode: int, dev: str) -> None:
        self._link(pid, inode)
        self.set_dev(pid, dev)

    def set_dev(self, pid: int, dev: str) -> None:
        (self.root / str(pid) / "net").mkdir(exist_ok=True)
        (self.root / str(pid) / "net" / "dev").write_text(dev)

    def sysfs(self, pid: int, **ifaces: tuple[str, str]) -> None:
        """``/proc/PID/root/sys/class/net/IFACE/{operstate,speed}``."""
        for name, (state, speed) in ifaces.items():
            path = self.root / str(pid) / "root" / "sys" / "class" / "net" / name
            path.mkdir(parents=True)
            (path / "operstate").write_text(state + "\n")
            (path / "speed").write_text(speed + "\n")


def job(pid: int, name: str = "llama", job_id: str = "run:abc/2", state: str = "live"):
    return dataclasses.replace(data_bound_job(pid), name=name, job_id=job_id, state=state)


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path)


def collector(proc: FakeProc, clock=None, **kwargs) -> JobNicCollector:
    return JobNicCollector(proc_root=str(proc.root), clock=clock or time.monotonic, **kwargs)


def test_parse_net_dev_reads_counters_even_when_they_touch_the_colon() -> None:
    text = HEADER + "  eth0:123 4 0 0 0 0 0 0 567 8 0 0 0 0 0 0\nbond0:99999999999 1 0 0 0 0 0 0 "
    text += "1 1 0 0 0 0 0 0\n"
    parsed = parse_net_dev(text)
    assert parsed["eth0"][0] == 123 and parsed["eth0"][8] == 567
    assert parsed["bond0"][0] == 99_999_999_999


def test_jobs_in_the_monitors_namespace_are_not_counted_twice(proc: FakeProc) -> None:
    proc.process(100, OWN_NS, net_dev(eth0=(1, 1, 1, 1)))
    assert collector(proc).collect([job(100)]) == ()


def test_a_jobs_namespace_is_read_once_tagged_and_rated(proc: FakeProc) -> None:
    now = [10.0]
    proc.process(200, JOB_NS, net_dev(eth0=(1000, 10, 2000, 20)))
    proc.process(201, JOB_NS, "not read: rank 0 speaks for the namespace")
    ranks = [job(201), job(200)]
    nics = collector(proc, clock=lambda: now[0])
    (first,) = nics.collect(ranks)
    assert (first.name, first.job, first.job_ids, first.netns_inode) == (
        "eth0", "llama", ("run:abc/2",), JOB_NS)  # fmt: skip
    assert first.rx_bytes_per_s is None and first.is_up and first.speed_mbps is None
    proc.set_dev(200, net_dev(eth0=(1000 + 5_000_000, 510, 2000 + 1_000_000, 120)))
    now[0] = 10.5
    (nic,) = nics.collect(ranks)
    assert (nic.rx_bytes_per_s, nic.tx_bytes_per_s) == (10e6, 2e6)
    assert (nic.rx_packets_per_s, nic.tx_packets_per_s) == (1000.0, 200.0)
    assert (nic.errors_per_s, nic.drops_per_s) == (0.0, 0.0)


def test_link_speed_comes_from_the_jobs_own_sysfs_only(proc: FakeProc) -> None:
    now = [0.0]
    proc.process(300, JOB_NS, net_dev(eth0=(0, 0, 0, 0), lo=(0, 0, 0, 0)))
    proc.sysfs(300, eth0=("up", "1000"), lo=("unknown", ""))
    nics = collector(proc, clock=lambda: now[0])
    nics.collect([job(300)])
    proc.set_dev(300, net_dev(eth0=(62_500_000, 1, 0, 0), lo=(0, 0, 0, 0)))
    now[0] = 1.0
    eth0, lo = nics.collect([job(300)])
    assert (eth0.speed_mbps, eth0.link_util_pct, eth0.is_up) == (1000, 50.0, True)
    assert (lo.speed_mbps, lo.is_up) == (None, True)  # loopback: "unknown" state, no speed


def test_the_hosts_sysfs_seen_through_a_shared_mount_is_not_trusted(proc: FakeProc) -> None:
    proc.process(400, JOB_NS, net_dev(eth0=(0, 0, 0, 0)))
    proc.sysfs(400, eth0=("down", "100000"), ib0=("up", "200000"))  # more names: not the job's
    (eth0,) = collector(proc).collect([job(400)])
    assert (eth0.speed_mbps, eth0.is_up) == (None, True)


def test_ended_jobs_unreadable_pids_and_virtual_interfaces(proc: FakeProc) -> None:
    proc.process(500, JOB_NS, net_dev(eth0=(0, 0, 0, 0), veth9=(0, 0, 0, 0)))
    ended = [job(500, state="finished"), job(501)]  # 501: no such process any more
    assert collector(proc).collect(ended) == ()
    names = [n.name for n in collector(proc).collect([job(500)])]
    assert names == ["eth0"]
    shown = collector(proc, include_virtual=True).collect([job(500)])
    assert [n.name for n in shown] == ["eth0", "veth9"]


def test_two_namespaces_two_jobs_sorted_by_tag(proc: FakeProc) -> None:
    proc.process(600, JOB_NS, net_dev(eth0=(0, 0, 0, 0)))
    proc.process(700, JOB_NS + 1, net_dev(eth0=(0, 0, 0, 0)))
    rows = collector(proc).collect([job(700, name="bert", job_id="b"), job(600)])
    assert [(n.job, n.netns_inode) for n in rows] == [("bert", JOB_NS + 1), ("llama", JOB_NS)]


class Fixed:
    total = None  # as a process collector: no scan count

    def __init__(self, value):
        self.value = value

    def collect(self, *_args):
        return self.value

    def close(self):
        pass


class Recording(Fixed):
    def collect(self, jobs):
        self.jobs = jobs
        return self.value


def test_the_sampler_appends_job_namespace_nics_after_the_hosts() -> None:
    host_nic = NicSnapshot("eth0", True, 25000, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0)
    job_nic = dataclasses.replace(host_nic, job="llama", netns_inode=JOB_NS)
    job_nics = Recording((job_nic,))
    parts = dict(cpu=Fixed(None), memory=Fixed(None), disks=Fixed(()), processes=Fixed(()),
                 host=Fixed(HostInfo("node", 1.0, 2)), gpu=Fixed(((), None)))  # fmt: skip
    jobs = (job(42),)
    with_jobs = Collectors(nics=Fixed((host_nic,)), jobs=Fixed(jobs), job_nics=job_nics, **parts)
    snap = Sampler(with_jobs).sample_once()
    assert snap.nics == (host_nic, job_nic) and job_nics.jobs == jobs
    without = Collectors(nics=Fixed((host_nic,)), jobs=Fixed(()), job_nics=job_nics, **parts)
    assert Sampler(without).sample_once().nics == (host_nic,)


def _netns_tools() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


@pytest.mark.skipif(not _netns_tools(), reason="needs root and iproute2 for a network namespace")
def test_a_real_namespaces_loopback_traffic_is_seen_from_outside(tmp_path: Path) -> None:
    """A process in its own netns sends 2 MB over its loopback; the monitor reads the bytes."""
    netns = f"ttb{os.getpid() % 100000}nics"
    subprocess.run(["ip", "netns", "add", netns], check=True, capture_output=True)
    sender = "import socket,sys,time\ns=socket.socket(2,2)\nsys.stdin.readline()\n"
    sender += "for _ in range(2000): s.sendto(b'x'*1000,('127.0.0.1',9))\nsys.stdin.readline()\n"
    try:
        subprocess.run(["ip", "netns", "exec", netns, "ip", "link", "set", "lo", "up"], check=True)
        child = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-c", sender],
                                 stdin=subprocess.PIPE, text=True)  # fmt: skip
        try:
            time.sleep(1.0)  # python starting in the namespace
            nics = JobNicCollector()
            ranks = [job(child.pid)]
            assert netns_inode("/proc", child.pid) != netns_inode("/proc", "self")
            (lo,) = nics.collect(ranks)
            child.stdin.write("go\n")
            child.stdin.flush()
            time.sleep(1.0)
            (lo,) = nics.collect(ranks)
            assert (lo.name, lo.job) == ("lo", "llama")
            assert lo.tx_bytes_per_s is not None and lo.tx_bytes_per_s > 0
        finally:
            child.stdin.close()
            child.wait(timeout=10)
    finally:
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)
