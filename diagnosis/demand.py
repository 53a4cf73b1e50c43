"""How much CPU the attached jobs ask for and how much they get, over every attached job.

The 1-minute load average lags by a minute and counts every process on the host, so it cannot
tell "these jobs fight over the cores" from "someone else is busy".  The jobs' own processes can:
a process with ``n`` threads can use up to ``min(n, cpus)`` cores, and when the jobs together
get far less than that on a saturated machine, they are short of CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from collectors.snapshot import Snapshot
from diagnosis.views import ProcView


@dataclass(frozen=True, slots=True)
class CpuDemand:
    """Trainers and their workers of all attached jobs (100 % = one core, as in htop)."""

    jobs: int
    threads: int
    cpu_pct: float
    want_pct: float

    @property
    def got_share(self) -> float:
        """Share of the CPU the jobs could use that they actually got."""
        return self.cpu_pct / self.want_pct if self.want_pct else 1.0


def _owner(latest: Snapshot) -> dict[int, int]:
    """``{pid: job pid}`` for every trainer and DataLoader worker of an attached job."""
    owner = {j.pid: j.pid for j in latest.jobs}
    owner.update({w.pid: j.pid for j in latest.jobs for w in j.workers})
    for p in latest.processes:
        if p.group_pid in owner and p.pid not in owner:
            owner[p.pid] = owner[p.group_pid]
    return owner


def cpu_demand(latest: Snapshot, procs: dict[int, ProcView], cpus: int) -> CpuDemand | None:
    """Threads, CPU use and CPU wanted by the attached jobs; ``None`` without thread counts."""
    threads: dict[int, int] = {}
    cpu = 0.0
    for pid, job in _owner(latest).items():
        view = procs.get(pid)
        if view is None or not view.num_threads:
            continue
        threads[job] = threads.get(job, 0) + view.num_threads
        cpu += view.cpu_pct or 0.0
    if not threads:
        return None
    want = sum(min(n, cpus) * 100.0 for n in threads.values())
    return CpuDemand(len(threads), sum(threads.values()), cpu, want)
