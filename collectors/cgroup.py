"""The CPUs a process may use: its cgroup's quota and cpuset, and how often the quota stopped it.

A container's CPU limit is not the host's CPU count.  ``docker --cpus 1``, a Kubernetes
``limits.cpu`` or a Slurm allocation give a job a CFS bandwidth quota (so many microseconds of
CPU per period, summed over its threads) and often a cpuset (the CPUs it may run on).  A job that
wants more than its quota runs until the quota is spent and is then *throttled* for the rest of
the period: its threads stay runnable, so the scheduler counts the time as waiting for a CPU
(``schedstat``), while the host's cores may sit idle beside it.  The kernel counts the periods
and the throttled time in the cgroup's ``cpu.stat``.

Both hierarchies are read (cgroup v1: ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``,
``cpuset.effective_cpus``, ``cpu.stat``'s ``throttled_time`` in ns; v2: ``cpu.max``,
``cpuset.cpus.effective``, ``cpu.stat``'s ``throttled_usec``), on the mounts this process sees
(``/proc/self/mountinfo``), or under one root given for tests.  A quota binds a cgroup's whole
subtree, so the least quota from the process's cgroup up to its hierarchy's root is the one that
counts, and that cgroup's ``cpu.stat`` is where its throttling shows.  A limit changes rarely and
throttling is a rate over seconds, so each process is read at most every ``READ_EVERY_S``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from traintop.collectors.snapshot import CpuLimit

READ_EVERY_S = 2.0
FORGET_AFTER_S = 30.0  # a process not asked about for this long is dropped
MAX_FOLDERS = 4096  # cgroup directories kept resolved before the table starts over
CPUSET_FILES = {1: ("cpuset.effective_cpus", "cpuset.cpus"), 2: ("cpuset.cpus.effective",)}
V2 = ""  # the unified hierarchy's key in /proc/PID/cgroup ("0::/path")
# The v1 hierarchies read (memory: memcg.py; blkio: the read limit the gains model uses).
CONTROLLERS = frozenset({"cpu", "cpuset", "memory", "blkio"})
_US, _NS = 1e-6, 1e-9


@dataclass(frozen=True, slots=True)
class Mount:
    """Where one hierarchy is mounted: ``root`` is the cgroup at ``path`` (mountinfo's field 4:
    not ``/`` inside a container that sees only its own subtree)."""

    version: int
    path: Path
    root: str = "/"


@dataclass(frozen=True, slots=True)
class Throttle:
    """``cpu.stat``'s counters: enforcement periods, those throttled, seconds throttled."""

    periods: int
    throttled: int
    throttled_s: float


@dataclass(frozen=True, slots=True)
class _Reading:
    """One process's last reading: when, the limit made of it, and the counters for the next."""

    at: float
    limit: CpuLimit | None
    counters: Throttle | None


def _unescape(field: str) -> str:
    """mountinfo writes a space in a path as ``\\040`` (and tab, newline, backslash alike)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mounts_from(mountinfo: str) -> dict[str, Mount]:
    """The ``cpu``, ``cpuset``, ``memory`` and ``blkio`` v1 mounts and the v2 mount (key
    ``V2``) in a mountinfo text, the first of each kind."""
    found: dict[str, Mount] = {}
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, point = _unescape(fields[3]), Path(_unescape(fields[4]))
        if tail[0] == "cgroup2":
            found.setdefault(V2, Mount(2, point, root))
        elif tail[0] == "cgroup":
            for controller in set(tail[2].split(",")) & CONTROLLERS:
                found.setdefault(controller, Mount(1, point, root))
    return found


def mounts_at(root: Path) -> dict[str, Mount]:
    """The hierarchies under one directory laid out as ``/sys/fs/cgroup``: unified (a
    ``cgroup.controllers`` file at the top) or v1 (a folder per controller, ``cpu,cpuacct``
    included)."""
    if (root / "cgroup.controllers").exists():
        return {V2: Mount(2, root)}
    found: dict[str, Mount] = {}
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    for folder in folders:
        for controller in set(folder.name.split(",")) & CONTROLLERS:
            found.setdefault(controller, Mount(1, folder))
    return found


def memberships(text: str) -> dict[str, str]:
    """``/proc/PID/cgroup``: each v1 controller's cgroup path, and the v2 one under ``V2``."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else (V2,):
            paths[controller] = path
    return paths


def parse_cpuset(text: str) -> tuple[int, ...]:
    """A cpuset list (``0-3,8,10-11``) as CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return tuple(sorted(cpus))


def parse_read_limits(text: str | None) -> list[int]:
    """The read bandwidth limits (bytes/s) in a v1 ``blkio.throttle.read_bps_device``
    (``8:0 4000000`` lines) or a v2 ``io.max`` (``8:0 rbps=4000000 wbps=max ...``)."""
    found = []
    for line in (text or "").splitlines():
        for word in line.split()[1:]:
            read = word.startswith("rbps=") or "=" not in word  # v2's read key, or v1's number
            value = word.removeprefix("rbps=") if read else ""
            if value.isdigit():
                found.append(int(value))
    return [v for v in found if v > 0]


def parse_cpu_stat(text: str) -> Throttle | None:
    """``cpu.stat``'s periods and throttling (v2 in µs, v1 in ns); None without them."""
    values = dict(line.split(None, 1) for line in text.splitlines() if " " in line)
    try:
        periods, throttled = int(values["nr_periods"]), int(values["nr_throttled"])
    except (KeyError, ValueError):
        return None
    if "throttled_usec" in values:
        return Throttle(periods, throttled, int(values["throttled_usec"]) * _US)
    return Throttle(periods, throttled, int(values.get("throttled_time", "0")) * _NS)


def _read(path: Path) -> str | None:
    """A small kernel file's text (None: unreadable); plain ``os`` calls, a third of what
    ``Path.read_text`` costs on cgroupfs."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 65536).decode()
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def quota_at(folder: Path, version: int) -> float | None:
    """One cgroup's own quota in CPUs (None: none set there)."""
    if version == 2:
        text = _read(folder / "cpu.max")
        words = text.split() if text else []
        if len(words) != 2 or words[0] == "max":
            return None
        return int(words[0]) / int(words[1])
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) <= 0 or int(period) <= 0:
        return None
    return int(quota) / int(period)


class CgroupReader:
    """Reads a process's :class:`~traintop.collectors.snapshot.CpuLimit`, at most every
    ``every_s``; between reads the last one is returned (the sampler asks on every tick).  The
    ranks of one container share its cgroup: its files are read once for all of them."""

    def __init__(
        self,
        root: str | Path | None = None,
        proc: str | Path = "/proc",
        clock: Callable[[], float] = time.monotonic,
        every_s: float = READ_EVERY_S,
        host_cpus: int | None = None,
    ) -> None:
        self._root = Path(root) if root is not None else None
        self._proc = Path(proc)
        self._clock = clock
        self._every_s = every_s
        self._host_cpus = host_cpus or os.cpu_count() or 1
        self._mounts: dict[str, Mount] | None = None
        self._members: dict[int, tuple[float, dict[str, str] | None]] = {}  # pid: when, paths
        self._groups: dict[tuple, _Reading] = {}  # by the cgroup paths of cpu, cpuset, v2
        self._folders: dict[tuple, tuple[Mount, Path, str] | None] = {}
        self._io: dict[tuple, tuple[float, float | None]] = {}  # by the blkio and v2 paths

    def limit(self, pid: int) -> CpuLimit | None:
        """``pid``'s CPU limit (None: no cgroup could be read for it, the process gone)."""
        now = self._clock()
        paths = self.paths(pid, now)
        if paths is None:
            return None
        key = (paths.get("cpu"), paths.get("cpuset"), paths.get(V2))
        last = self._groups.get(key)
        if last is None or now - last.at >= self._every_s:
            try:
                last = self._reading(paths, now, last)
            except (OSError, ValueError, ZeroDivisionError):
                last = _Reading(now, None, None)
            self._groups[key] = last
        return last.limit

    def read_limit(self, pid: int) -> float | None:
        """The least read bandwidth (bytes/s) ``pid``'s cgroups allow on any device (cgroup v1
        ``blkio.throttle.read_bps_device``, v2 ``io.max`` rbps), from its cgroup up to the
        root; None where none is set.  Read with the CPU limit's cadence."""
        now = self._clock()
        paths = self.paths(pid, now)
        if paths is None:
            return None
        key = ("io", paths.get("blkio"), paths.get(V2))
        last = self._io.get(key)
        if last is None or now - last[0] >= self._every_s:
            last = (now, self._least_read(paths))
            self._io[key] = last
        return last[1]

    def _least_read(self, paths: dict[str, str]) -> float | None:
        found = self.folder(paths, "blkio")
        if found is None:
            return None
        mount, folder, _ = found
        name = "io.max" if mount.version == 2 else "blkio.throttle.read_bps_device"
        levels = _up(folder, mount.path)
        limits = [v for level in levels for v in parse_read_limits(_read(level / name))]
        return float(min(limits)) if limits else None

    def paths(self, pid: int, now: float) -> dict[str, str] | None:
        """Which cgroups ``pid`` is in, read again every ``every_s`` (a process can move)."""
        known = self._members.get(pid)
        if known is not None and now - known[0] < self._every_s:
            return known[1]
        self._forget(now)
        text = _read(self._proc / str(pid) / "cgroup")
        paths = memberships(text) if text else None
        self._members[pid] = (now, paths)
        return paths

    def _forget(self, now: float) -> None:
        """Drop the processes and cgroups nobody asked about for ``FORGET_AFTER_S``."""
        for pid in [p for p, (at, _) in self._members.items() if now - at > FORGET_AFTER_S]:
            del self._members[pid]
        for key in [k for k, r in self._groups.items() if now - r.at > FORGET_AFTER_S]:
            del self._groups[key]
        for key in [k for k, (at, _) in self._io.items() if now - at > FORGET_AFTER_S]:
            del self._io[key]

    def mounts(self) -> dict[str, Mount]:
        """The hierarchies, found once."""
        if self._mounts is None:
            if self._root is not None:
                self._mounts = mounts_at(self._root)
            else:
                self._mounts = mounts_from(_read(self._proc / "self" / "mountinfo") or "")
        return self._mounts

    def folder(self, paths: dict[str, str], controller: str) -> tuple[Mount, Path, str] | None:
        """The directory of ``controller``'s cgroup: its v1 hierarchy, else the unified one
        (kept by the paths it comes from: building a ``Path`` is most of a rank's reads a tick)."""
        key = (controller, paths.get(controller), paths.get(V2))
        if key not in self._folders:
            if len(self._folders) > MAX_FOLDERS:
                self._folders.clear()
            self._folders[key] = self._folder(paths, controller)
        return self._folders[key]

    def _folder(self, paths: dict[str, str], controller: str) -> tuple[Mount, Path, str] | None:
        for key in (controller, V2):
            mount, path = self.mounts().get(key), paths.get(key)
            if mount is None or path is None:
                continue
            inside = _inside(mount, path)
            if inside is not None:
                return mount, inside, path
        return None

    def _reading(self, paths: dict[str, str], now: float, last: _Reading | None) -> _Reading:
        cpu = self.folder(paths, "cpu")
        quota, binding = _least_quota(*cpu[:2]) if cpu else (None, None)
        counters = _counters(binding)
        cpuset = self._cpuset(paths)
        bounds = [quota or math.inf, len(cpuset) if cpuset else math.inf, self._host_cpus]
        limit = CpuLimit(
            cpus=float(min(bounds)),
            quota_cpus=quota,
            cpuset=cpuset,
            cgroup=cpu[2] if cpu else paths.get(V2, ""),
            **_throttling(last, counters, now),
        )
        return _Reading(now, limit, counters)

    def _cpuset(self, paths: dict[str, str]) -> tuple[int, ...] | None:
        """The effective cpuset, None when it is every CPU of the host (or unreadable)."""
        found = self.folder(paths, "cpuset")
        if found is None:
            return None
        mount, folder, _ = found
        text = _first_up(folder, mount.path, CPUSET_FILES[mount.version])
        cpus = parse_cpuset(text) if text else ()
        return cpus if cpus and len(cpus) < self._host_cpus else None


def _inside(mount: Mount, path: str) -> Path | None:
    """The directory under ``mount`` of the cgroup ``path`` names (None: outside its view)."""
    root = mount.root.rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]
    parts = [p for p in path.split("/") if p]
    if ".." in parts:
        return None  # a cgroup outside this namespace's view
    return mount.path.joinpath(*parts)


def _up(folder: Path, top: Path) -> list[Path]:
    """``folder`` and its parents up to the hierarchy's mount point, innermost first."""
    chain = [folder]
    while chain[-1] != top and top in chain[-1].parents:
        chain.append(chain[-1].parent)
    return chain


def _first_up(folder: Path, top: Path, names: tuple[str, ...]) -> str | None:
    """The first of ``names`` found from ``folder`` upwards: v2 writes the cpuset files only
    where the controller is enabled, a child without them has its parent's."""
    for level in _up(folder, top):
        for name in names:
            text = _read(level / name)
            if text is not None and text.strip():
                return text
    return None


def _least_quota(mount: Mount, folder: Path) -> tuple[float | None, Path | None]:
    """The least quota from ``folder`` up to the root, and the cgroup that sets it."""
    best: tuple[float | None, Path | None] = (None, None)
    for level in _up(folder, mount.path):
        quota = quota_at(level, mount.version)
        if quota is not None and (best[0] is None or quota < best[0]):
            best = (quota, level)
    return best


def _counters(binding: Path | None) -> Throttle | None:
    text = _read(binding / "cpu.stat") if binding is not None else None
    return parse_cpu_stat(text) if text else None


def _throttling(last: _Reading | None, now_counters: Throttle | None, now: float) -> dict:
    """The share of the last interval's periods that were throttled, and the throttled seconds
    per second (summed over CPUs, as the kernel sums them); None on a first reading, after a
    reset, or over an interval without a period."""
    if last is None or last.counters is None or now_counters is None or now <= last.at:
        return {}
    before = last.counters
    periods = now_counters.periods - before.periods
    throttled = now_counters.throttled - before.throttled
    seconds = now_counters.throttled_s - before.throttled_s
    if periods < 0 or throttled < 0 or seconds < 0:
        return {}
    share = throttled / periods if periods else None
    return {"throttled_share": share, "throttled_s_per_s": seconds / (now - last.at)}
