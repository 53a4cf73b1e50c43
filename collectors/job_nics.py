"""NIC counters from the network namespaces training jobs live in (containers, ``ip netns``).

psutil reads ``/proc/net/dev``, which is the *monitor's* network namespace: a job in a container
or its own namespace sends its gradients over interfaces the host table never lists (at most
as a hidden veth on the host side).  The kernel answers ``/proc/PID/net/dev`` in the namespace
of PID, so reading it per job sees the job's own eth0, ib0 or loopback.  A namespace is named by
the inode of ``/proc/PID/ns/net``: jobs sharing the monitor's namespace are skipped (the host
rows already count them), and several ranks in one namespace are read once.

Link speed and up/down state live in sysfs, and ``/sys/class/net`` shows the namespace of
whoever *mounted* that sysfs, not the reader's.  A container (and ``ip netns exec``) mounts its
own, reachable as ``/proc/PID/root/sys/class/net``; it is trusted only when it lists exactly the
interfaces ``/proc/PID/net/dev`` does (otherwise it is the host's sysfs seen through a shared
mount), and then read every ``LINK_FACTS_TTL_S``.  Reading another user's ``/proc/PID/root``
needs root or ptrace rights: without them speed is unknown and the counters still show.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from traintop.collectors.nics import (
    LINK_FACTS_TTL_S,
    VIRTUAL_PREFIXES,
    link_util_pct,
    parse_net_dev,
)
from traintop.collectors.rates import rate
from traintop.collectors.snapshot import JobSnapshot, NicSnapshot

RUNNING_STATES = ("live", "stalled")
"""Jobs whose processes exist: a finished or crashed job's pid is gone, or worse, reused."""

# /proc/net/dev columns after "iface:": 8 receive fields, then 8 transmit fields.
_RX_BYTES, _RX_PACKETS, _RX_ERRS, _RX_DROP = 0, 1, 2, 3
_TX_BYTES, _TX_PACKETS, _TX_ERRS, _TX_DROP = 8, 9, 10, 11


@dataclass(frozen=True, slots=True)
class Namespace:
    """One network namespace holding jobs: its inode, a pid to read it through, who is in it."""

    inode: int
    pid: int
    names: tuple[str, ...]
    job_ids: tuple[str, ...]

    @property
    def tag(self) -> str:
        """What the Network panel shows after ``@``: the job's name (or names)."""
        return "+".join(self.names)


@dataclass(frozen=True, slots=True)
class LinkFacts:
    """What sysfs says about one interface of a namespace."""

    is_up: bool
    speed_mbps: int | None


def netns_inode(proc_root: str, pid: int | str) -> int | None:
    """Inode of the process's network namespace (``net:[4026531840]``), None if unreadable."""
    try:
        link = os.readlink(f"{proc_root}/{pid}/ns/net")
    except OSError:
        return None
    digits = link.rpartition("[")[2].rstrip("]")
    return int(digits) if digits.isdigit() else None


class JobNicCollector:
    """Per-interface rates for every job namespace other than the monitor's own."""

    def __init__(
        self,
        proc_root: str = "/proc",
        clock: Callable[[], float] = time.monotonic,
        include_virtual: bool = False,
    ) -> None:
        self._proc = proc_root
        self._clock = clock
        self._include_virtual = include_virtual
        self._own = netns_inode(proc_root, "self")
        self._inodes: dict[int, int | None] = {}  # pid -> netns: a process rarely moves
        self._prev: dict[int, tuple[float, Mapping[str, tuple[int, ...]]]] = {}
        self._links: dict[int, tuple[float, Mapping[str, LinkFacts]]] = {}

    def collect(self, jobs: Iterable[JobSnapshot]) -> tuple[NicSnapshot, ...]:
        """Rows for the namespaces of running jobs, sorted by job tag then interface name."""
        rows: list[NicSnapshot] = []
        seen: set[int] = set()
        for space in self.namespaces(jobs):
            counters = self._read_counters(space)
            if counters is not None:
                seen.add(space.inode)
                rows.extend(self._rows(space, counters))
        self._prev = {k: v for k, v in self._prev.items() if k in seen}
        self._links = {k: v for k, v in self._links.items() if k in seen}
        return tuple(sorted(rows, key=lambda n: (n.job or "", n.name)))

    def namespaces(self, jobs: Iterable[JobSnapshot]) -> list[Namespace]:
        """Running jobs grouped by network namespace, the monitor's own left out."""
        members: dict[int, list[JobSnapshot]] = {}
        running = [job for job in jobs if job.state in RUNNING_STATES]
        known, self._inodes = self._inodes, {}
        for job in running:
            inode = known[job.pid] if job.pid in known else netns_inode(self._proc, job.pid)
            self._inodes[job.pid] = inode
            if inode is not None and inode != self._own:
                members.setdefault(inode, []).append(job)
        return [_namespace(inode, found) for inode, found in members.items()]

    def _read_counters(self, space: Namespace) -> dict[str, tuple[int, ...]] | None:
        try:
            with open(f"{self._proc}/{space.pid}/net/dev") as f:
                return parse_net_dev(f.read())
        except (OSError, ValueError):
            return None

    def _rows(self, space: Namespace, counters: dict[str, tuple[int, ...]]) -> list[NicSnapshot]:
        now = self._clock()
        prev_t, prev = self._prev.get(space.inode, (now, {}))
        self._prev[space.inode] = (now, counters)
        links = self._link_facts(space, now, counters)
        return [
            _nic_row(space, name, prev.get(name), cur, links.get(name), now - prev_t)
            for name, cur in sorted(counters.items())
            if self._include_virtual or not name.startswith(VIRTUAL_PREFIXES)
        ]

    def _link_facts(self, space: Namespace, now: float, counters: Mapping) -> Mapping:
        """Sysfs facts of the namespace, re-read every ``LINK_FACTS_TTL_S`` or on a new NIC."""
        read_t, links = self._links.get(space.inode, (float("-inf"), {}))
        if now - read_t >= LINK_FACTS_TTL_S or not counters.keys() <= links.keys():
            links = self._read_links(space.pid, counters.keys())
            self._links[space.inode] = (now, links)
        return links

    def _read_links(self, pid: int, names: Iterable[str]) -> dict[str, LinkFacts]:
        """Sysfs seen from inside the job, when it is the job's namespace's own (see above)."""
        base = f"{self._proc}/{pid}/root/sys/class/net"
        try:
            listed = set(os.listdir(base))
        except OSError:
            return {}
        wanted = set(names)
        if listed != wanted:
            return {}
        return {name: _link(f"{base}/{name}") for name in wanted}


def _namespace(inode: int, jobs: list[JobSnapshot]) -> Namespace:
    names = tuple(dict.fromkeys(job.name for job in jobs))
    job_ids = tuple(dict.fromkeys(job.job_id for job in jobs if job.job_id))
    return Namespace(inode, min(job.pid for job in jobs), names, job_ids)


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:  # EINVAL: a virtual interface has no speed; ENOENT: gone
        return None


def _link(path: str) -> LinkFacts:
    """``operstate`` (loopback says "unknown" while carrying traffic) and ``speed`` in Mb/s."""
    state = _read_text(f"{path}/operstate")
    speed = _read_text(f"{path}/speed")
    mbps = int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0 else None
    return LinkFacts(is_up=state in ("up", "unknown"), speed_mbps=mbps)


def _nic_row(
    space: Namespace,
    name: str,
    prev: tuple[int, ...] | None,
    cur: tuple[int, ...],
    link: LinkFacts | None,
    dt: float,
) -> NicSnapshot:
    """Rates for one interface of a job's namespace; no sysfs means up, speed unknown."""
    speed = link.speed_mbps if link else None
    rx = _rate(prev, cur, dt, _RX_BYTES)
    tx = _rate(prev, cur, dt, _TX_BYTES)
    return NicSnapshot(
        name=name,
        is_up=link.is_up if link else True,
        speed_mbps=speed,
        rx_bytes_per_s=rx,
        tx_bytes_per_s=tx,
        rx_packets_per_s=_rate(prev, cur, dt, _RX_PACKETS),
        tx_packets_per_s=_rate(prev, cur, dt, _TX_PACKETS),
        errors_per_s=_rate(prev, cur, dt, _RX_ERRS, _TX_ERRS),
        drops_per_s=_rate(prev, cur, dt, _RX_DROP, _TX_DROP),
        link_util_pct=link_util_pct(rx, tx, speed),
        job=space.tag,
        job_ids=space.job_ids,
        netns_inode=space.inode,
    )


def _rate(
    prev: tuple[int, ...] | None, cur: tuple[int, ...], dt: float, *cols: int
) -> float | None:
    """Rate of the summed columns; ``None`` on an interface's first reading."""
    if prev is None:
        return None
    return rate(sum(prev[c] for c in cols), sum(cur[c] for c in cols), dt)
