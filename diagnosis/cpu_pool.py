"""Which CPUs a rank shares, and with whom: its cgroup's when that limits it, else the host's.

Ranks of one container share its quota; ranks in no limited cgroup share the host's CPUs.  The
box counts the judged ranks of each pool once (``Box.pools``), so the worker advice of each
rank divides the CPUs it may use among the ranks that use them too.
"""

from __future__ import annotations

from traintop.collectors.snapshot import CpuLimit, JobSnapshot

HOST = ""  # the pool of the ranks no cgroup limits


def limiting(limit: CpuLimit | None) -> bool:
    """Whether a cgroup gives the rank fewer CPUs than the host: a quota, or a cpuset."""
    return limit is not None and (limit.quota_cpus is not None or limit.cpuset is not None)


def pool_of(job: JobSnapshot) -> str:
    """The CPUs ``job`` shares: its cgroup's path when that limits it, else the host's."""
    limit = job.cpu_limit
    if limit is None or not limiting(limit):
        return HOST
    return limit.cgroup or f"pid {job.pid}"
