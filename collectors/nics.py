"""Network interfaces: throughput, packets, errors, drops and link utilization.

What is shown by default follows what a GPU-node user wants to watch: the NICs that carry data
(Ethernet, InfiniBand, bonds, Wi-Fi), not the container plumbing that mirrors their traffic.
Loopback is hidden (``include_loopback=True`` shows it), and so are container and tunnel
interfaces: veth pairs, docker/CNI bridges, Calico/Flannel/Cilium/Weave devices, ifb
(``include_virtual=True`` shows them).  A Kubernetes GPU node has dozens of those, and each
duplicates traffic already counted on the physical NIC.  On Linux the counters come from
``/proc/net/dev`` kept open (:class:`NetDev`), one ``pread`` a tick.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, NamedTuple

import psutil

from traintop.collectors import procfs
from traintop.collectors.rates import measured, rate
from traintop.collectors.snapshot import NicSnapshot

PROC_NET_DEV = "/proc/net/dev"
"""The monitor's own network namespace (``/proc/net`` is ``/proc/self/net``), as psutil reads."""

VIRTUAL_PREFIXES = (
    "veth",
    "docker",
    "br-",
    "virbr",
    "cali",
    "flannel",
    "cni",
    "cilium_",
    "lxc",
    "weave",
    "vxlan",
    "tunl",
    "kube-",
    "ifb",
)
"""Container, overlay and traffic-shaping interfaces hidden unless ``include_virtual``."""

LINK_FACTS_TTL_S = 5.0
"""How long link speed and up/down state are reused: ``net_if_stats`` makes several ioctls per
interface, the costliest call of a tick's host sampling, for facts that rarely change."""


def is_loopback(name: str, stats: Any) -> bool:
    """``lo`` by name, or any interface whose flags say loopback (psutil >= 5.9.3 has flags)."""
    return name == "lo" or "loopback" in getattr(stats, "flags", "").split(",")


class NicCollector:
    """Per-NIC rates from ``net_io_counters(pernic=True)`` deltas plus ``net_if_stats``."""

    def __init__(
        self,
        ps: ModuleType | Any = psutil,
        clock: Callable[[], float] = time.monotonic,
        include_loopback: bool = False,
        include_virtual: bool = False,
    ):
        self._ps = ps
        self._clock = clock
        self._net_dev = NetDev() if ps is psutil and os.path.exists(PROC_NET_DEV) else None
        self._include_loopback = include_loopback
        self._include_virtual = include_virtual
        self._prev: Mapping[str, Any] = {}
        self._prev_t: float | None = None
        self._stats: Mapping[str, Any] = {}
        self._stats_t = float("-inf")

    def collect(self) -> tuple[NicSnapshot, ...]:
        """One row per shown NIC, sorted by name; rates are ``None`` for a NIC's first tick."""
        now = self._clock()
        counters = self._counters()
        stats = self._link_facts(now, counters)
        dt = 0.0 if self._prev_t is None else now - self._prev_t
        rows = tuple(
            _nic_row(name, self._prev.get(name), cur, stats.get(name), dt)
            for name, cur in sorted(counters.items())
            if self._shown(name, stats.get(name))
        )
        self._prev, self._prev_t = counters, now
        return rows

    def _counters(self) -> Mapping[str, Any]:
        """Every interface's counters: one read of /proc/net/dev, or psutil."""
        if self._net_dev is not None:
            return self._net_dev.read()
        return self._ps.net_io_counters(pernic=True) or {}

    def _link_facts(self, now: float, counters: Mapping[str, Any]) -> Mapping[str, Any]:
        """``net_if_stats()``, re-read every ``LINK_FACTS_TTL_S`` or when a NIC appears."""
        if now - self._stats_t >= LINK_FACTS_TTL_S or not counters.keys() <= self._stats.keys():
            self._stats, self._stats_t = self._ps.net_if_stats(), now
        return self._stats

    def _shown(self, name: str, stats: Any) -> bool:
        """Apply the loopback and virtual-interface filters."""
        if is_loopback(name, stats):
            return self._include_loopback
        return self._include_virtual or not name.startswith(VIRTUAL_PREFIXES)


class NicCounters(NamedTuple):
    """psutil's ``snetio``."""

    bytes_sent: int
    bytes_recv: int
    packets_sent: int
    packets_recv: int
    errin: int
    errout: int
    dropin: int
    dropout: int


class NetDev:
    """``psutil.net_io_counters(pernic=True)`` from one read of ``/proc/net/dev``.

    The counters are the kernel's own, where psutil by default adds back what a counter lost
    when it wrapped: ``traintop.collectors.rates`` takes wraps into account itself.
    """

    def __init__(self, path: str = PROC_NET_DEV) -> None:
        self._file = procfs.KeptFile(path)

    def read(self) -> dict[str, NicCounters]:
        table = parse_net_dev(self._file.read().decode(errors="replace"))
        return {name: _nic_counters(columns) for name, columns in table.items()}


def parse_net_dev(text: str) -> dict[str, tuple[int, ...]]:
    """``/proc/net/dev`` as ``{iface: (16 counters)}``; a large counter may touch the colon."""
    found = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if sep and len(fields) >= 16:
            found[name.strip()] = tuple(int(f) for f in fields[:16])
    return found


def _nic_counters(columns: tuple[int, ...]) -> NicCounters:
    """8 receive columns (bytes, packets, errs, drop, ...), then 8 transmit columns."""
    rx_bytes, rx_packets, rx_errs, rx_drop = columns[0:4]
    tx_bytes, tx_packets, tx_errs, tx_drop = columns[8:12]
    return NicCounters(tx_bytes, rx_bytes, tx_packets, rx_packets, rx_errs, tx_errs, rx_drop,
                       tx_drop)  # fmt: skip


def _nic_row(name: str, prev: Any, cur: Any, stats: Any, dt: float) -> NicSnapshot:
    """Rates for one NIC; the link facts come from ``net_if_stats`` (absent = down, unknown)."""
    speed = (stats.speed or None) if stats is not None else None
    rx = _rate_of(prev, cur, dt, "bytes_recv")
    tx = _rate_of(prev, cur, dt, "bytes_sent")
    return NicSnapshot(
        name=name,
        is_up=bool(stats is not None and stats.isup),
        speed_mbps=speed,
        rx_bytes_per_s=rx,
        tx_bytes_per_s=tx,
        rx_packets_per_s=_rate_of(prev, cur, dt, "packets_recv"),
        tx_packets_per_s=_rate_of(prev, cur, dt, "packets_sent"),
        errors_per_s=_rate_of(prev, cur, dt, "errin", "errout"),
        drops_per_s=_rate_of(prev, cur, dt, "dropin", "dropout"),
        link_util_pct=link_util_pct(rx, tx, speed),
    )


def _rate_of(prev: Any, cur: Any, dt: float, *fields: str) -> float | None:
    """Rate of the sum of ``fields``; ``None`` on a NIC's first tick."""
    if prev is None:
        return None
    return rate(sum(getattr(prev, f) for f in fields), sum(getattr(cur, f) for f in fields), dt)


def link_util_pct(rx: float | None, tx: float | None, speed_mbps: int | None) -> float | None:
    """Busier direction as a share of link speed: links are full duplex, each way has the speed."""
    if speed_mbps is None or rx is None or tx is None:
        return None
    return min(100.0, measured(100.0 * max(rx, tx) * 8 / (speed_mbps * 1e6)))
