"""Network interfaces: throughput, packets, errors, drops and link utilization.

What is shown by default follows what a GPU-node user wants to watch: the NICs that carry data
(Ethernet, InfiniBand, bonds, Wi-Fi), not the container plumbing that mirrors their traffic.
Loopback is hidden (``include_loopback=True`` shows it), and so are container and tunnel
interfaces: veth pairs, docker/CNI bridges, Calico/Flannel/Cilium/Weave devices, ifb
(``include_virtual=True`` shows them).  A Kubernetes GPU node has dozens of those, and each
duplicates traffic already counted on the physical NIC.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import psutil

from collectors.rates import rate
from collectors.snapshot import NicSnapshot

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
        self._include_loopback = include_loopback
        self._include_virtual = include_virtual
        self._prev: Mapping[str, Any] = {}
        self._prev_t: float | None = None
        self._stats: Mapping[str, Any] = {}
        self._stats_t = float("-inf")

    def collect(self) -> tuple[NicSnapshot, ...]:
        """One row per shown NIC, sorted by name; rates are ``None`` for a NIC's first tick."""
        now = self._clock()
        counters = self._ps.net_io_counters(pernic=True) or {}
        stats = self._link_facts(now, counters)
        dt = 0.0 if self._prev_t is None else now - self._prev_t
        rows = tuple(
            _nic_row(name, self._prev.get(name), cur, stats.get(name), dt)
            for name, cur in sorted(counters.items())
            if self._shown(name, stats.get(name))
        )
        self._prev, self._prev_t = counters, now
        return rows

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
    return min(100.0, 100.0 * max(rx, tx) * 8 / (speed_mbps * 1e6))
