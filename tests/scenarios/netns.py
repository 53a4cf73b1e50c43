"""Network namespaces standing for hosts and containers, with links shaped by ``tc``.

``slow_link``: two namespaces joined by one bandwidth-limited veth, a slow link between two
"hosts".  Each namespace sees its end of the veth as ``eth0`` (what a container sees too) with a
private 10.x address; a token-bucket qdisc on both ends caps the rate in both directions.

``loopback_host``: one namespace whose loopback is the job's whole network, as for the ranks of
one job in one container talking over ``lo``; a token bucket on ``lo`` caps the traffic of all
ranks together (every byte crosses that one queue once), or nothing does (a fast link).

Nothing leaves the machine, and deleting a namespace on exit destroys its devices with it.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.scenarios.harness import ScenarioUnavailable

IFNAME = "eth0"
SUBNET = "10.231.{}.0"
ETHERNET_MTU = 1500
_SERIAL = itertools.count()


@dataclass(frozen=True)
class Host:
    """One namespace, standing for one machine of the job."""

    netns: str
    address: str

    def exec_prefix(self) -> list[str]:
        """Run a command inside this namespace."""
        return ["ip", "netns", "exec", self.netns]


@dataclass(frozen=True)
class SlowLink:
    """The two hosts and the shaped rate between them."""

    hosts: tuple[Host, Host]
    rate: str


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise ScenarioUnavailable(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


def _in(netns: str, *argv: str) -> None:
    _ip("netns", "exec", netns, *argv)


def _configure(host: Host, veth: str, rate: str) -> None:
    """Move ``veth`` into the host's namespace as eth0, address it, bring it up, shape it."""
    _ip("link", "set", veth, "netns", host.netns)
    _in(host.netns, "ip", "link", "set", veth, "name", IFNAME)
    _in(host.netns, "ip", "addr", "add", f"{host.address}/24", "dev", IFNAME)
    _in(host.netns, "ip", "link", "set", IFNAME, "up")
    _in(host.netns, "ip", "link", "set", "lo", "up")
    _shape(host.netns, IFNAME, rate)


def _delete(netns: str) -> None:
    subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=30)


def _require_tools() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        raise ScenarioUnavailable("network namespaces need root and iproute2 (ip, tc)")


def _shape(netns: str, device: str, rate: str) -> None:
    _in(netns, "tc", "qdisc", "add", "dev", device, "root",
        "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms")  # fmt: skip


@contextmanager
def loopback_host(rate: str | None) -> Iterator[Host]:
    """A namespace of its own (``ttb*``) with ``lo`` up, capped at ``rate`` unless None.

    ``lo`` gets Ethernet's MTU: its default 64 KiB makes every TCP segment larger than the
    token bucket's burst, and tbf drops what can never fit the bucket.
    """
    _require_tools()
    host = Host(f"ttb{os.getpid() % 100000}x{next(_SERIAL)}", "127.0.0.1")
    _ip("netns", "add", host.netns)
    try:
        _in(host.netns, "ip", "link", "set", "lo", "mtu", str(ETHERNET_MTU), "up")
        if rate is not None:
            _shape(host.netns, "lo", rate)
        yield host
    finally:
        _delete(host.netns)


@contextmanager
def slow_link(rate: str = "20mbit") -> Iterator[SlowLink]:
    """Create the namespaces and the shaped veth; always delete them again."""
    _require_tools()
    tag = f"tt{os.getpid() % 100000}"
    subnet = SUBNET.format(os.getpid() % 250).rsplit(".", 1)[0]
    hosts = (Host(f"{tag}-a", f"{subnet}.1"), Host(f"{tag}-b", f"{subnet}.2"))
    veths = (f"{tag}a", f"{tag}b")
    created: list[str] = []
    try:
        for host in hosts:
            _ip("netns", "add", host.netns)
            created.append(host.netns)
        _ip("link", "add", veths[0], "type", "veth", "peer", "name", veths[1])
        for host, veth in zip(hosts, veths, strict=True):
            _configure(host, veth, rate)
        yield SlowLink(hosts, rate)
    finally:
        for netns in created:
            _delete(netns)
        subprocess.run(["ip", "link", "del", veths[0]], capture_output=True, timeout=30)
