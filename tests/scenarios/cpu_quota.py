"""A CPU quota on demand: a cgroup v1 ``cpu`` group with a CFS quota, as a container limit sets.

``docker --cpus 1`` (and a Kubernetes ``limits.cpu: 1``) is a CFS bandwidth quota of one
period's worth of CPU time per period.  The development VM mounts the v1 ``cpu`` hierarchy
writable for root, so a scenario can put a real training job under the same limit: the workload
joins the group before it execs (its DataLoader workers inherit it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tests.scenarios.harness import ScenarioUnavailable
from traintop.collectors.cgroup import Throttle, parse_cpu_stat

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000


@dataclass(frozen=True)
class CpuQuota:
    """A cgroup whose members share ``cpus`` CPUs of CFS quota."""

    cgroup: Path
    cpus: float

    def join_prefix(self) -> list[str]:
        """A command prefix that moves itself into the group, then execs the rest."""
        procs = self.cgroup / "cgroup.procs"
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]

    def counters(self) -> Throttle | None:
        """The kernel's own count of the group's periods and throttled periods so far."""
        return parse_cpu_stat((self.cgroup / "cpu.stat").read_text())


def throttled_share(before: Throttle | None, after: Throttle | None) -> float | None:
    """The share of the periods between two readings in which the quota stopped the group."""
    if before is None or after is None or after.periods <= before.periods:
        return None
    return (after.throttled - before.throttled) / (after.periods - before.periods)


def _check() -> None:
    if not (CPU_ROOT / "cpu.cfs_quota_us").exists():
        raise ScenarioUnavailable(f"no cgroup v1 cpu hierarchy at {CPU_ROOT}")
    if os.geteuid() != 0 or not os.access(CPU_ROOT, os.W_OK):
        raise ScenarioUnavailable("a cpu cgroup needs root and a writable hierarchy")


def _empty(cgroup: Path) -> None:
    """Wait for the group's processes to go (the harness killed them), then remove it."""
    deadline = time.monotonic() + 10.0
    while (cgroup / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.1)
    with suppress(OSError):
        cgroup.rmdir()


@contextmanager
def cpu_quota(cpus: float, name: str) -> Iterator[CpuQuota]:
    """A fresh group under the v1 ``cpu`` hierarchy limited to ``cpus`` CPUs, removed after."""
    _check()
    cgroup = CPU_ROOT / f"{name}-{os.getpid()}"
    try:
        cgroup.mkdir()
        (cgroup / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (cgroup / "cpu.cfs_quota_us").write_text(str(int(cpus * PERIOD_US)))
    except OSError as exc:
        raise ScenarioUnavailable(f"could not make a cpu cgroup: {exc}") from exc
    try:
        yield CpuQuota(cgroup, cpus)
    finally:
        _empty(cgroup)
