"""The CPU panel's word on the attached jobs' CPU limits: the cores a job may use are its cgroup's.

A host's 16 cores mean little to a job in a container limited to one: the panel shows the host,
and under it the limit of the live job that is held tightest (its quota or cpuset, from
``JobSnapshot.cpu_limit``) and how often the quota throttled it, so "2 cores, one idle" beside a
loader-starved job reads as what it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from traintop.collectors.snapshot import CpuLimit, JobSnapshot
from traintop.diagnosis.cpu_pool import limiting
from traintop.diagnosis.text import rank_list

LIVE = ("live", "stalled", "starting")


def tightest(jobs: Sequence[JobSnapshot]) -> tuple[JobSnapshot, int] | None:
    """The live rank whose cgroup gives it the fewest CPUs, and how many live ranks share
    that cgroup (None: no live job is limited)."""
    limited = [j for j in jobs if j.state in LIVE and limiting(j.cpu_limit)]
    if not limited:
        return None
    job = min(limited, key=lambda j: (j.cpu_limit.cpus if j.cpu_limit else 0.0, j.pid))
    cgroups = [j.cpu_limit.cgroup for j in limited if j.cpu_limit is not None]
    return job, cgroups.count(job.cpu_limit.cgroup if job.cpu_limit else "")


def _cpus(limit: CpuLimit) -> str:
    """``1.0 CPU (cgroup quota)``, ``CPUs 0-3 (cgroup cpuset)``."""
    from traintop.diagnosis.job_cpus import amount, source  # with the rules: none at start

    if source(limit) == "cgroup cpuset" and limit.cpuset is not None:
        return f"CPUs {rank_list(list(limit.cpuset)).replace(', ', ',')} (cgroup cpuset)"
    return f"{amount(limit)} (cgroup quota)"


def limit_line(jobs: Sequence[JobSnapshot], host_cpus: int) -> tuple[str, bool] | None:
    """``job train.py limited to 1.0 CPU (cgroup quota) of 2 · throttled 79 % of periods``,
    and whether the quota throttles it (a fifth of its periods or more)."""
    found = tightest(jobs)
    if found is None:
        return None
    from traintop.diagnosis.job_cpus import THROTTLED_SHARE

    job, ranks = found
    limit = job.cpu_limit
    assert limit is not None
    who = f"job {job.name}" + (f" ({ranks} ranks)" if ranks > 1 else "")
    text = f"{who} limited to {_cpus(limit)} of {host_cpus}"
    share = limit.throttled_share
    if share is not None and limit.quota_cpus is not None:
        text += f" · throttled {share * 100:.0f} % of periods"
    return text, share is not None and share >= THROTTLED_SHARE
