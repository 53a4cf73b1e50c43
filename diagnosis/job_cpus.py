"""The CPUs a job may use, and whether its cgroup's quota holds it back.

Every figure that counts CPUs for a job (how many DataLoader workers fit, whether there is CPU to
spare, what a CPU-only trainer's threads could use) counts the CPUs its cgroup gives it, its
quota and cpuset (collectors/cgroup.py), divided among the ranks that share them, not the
host's: in a container limited to one CPU on a 16-core host, "16 logical CPUs" promises workers
that would only queue.  A quota that throttles the job is a cause of its own: its threads stay
runnable while throttled, so they read as "waiting for a CPU" beside idle cores.
"""

from __future__ import annotations

from dataclasses import dataclass

from traintop.collectors.snapshot import CpuLimit
from traintop.diagnosis.context import Context, once
from traintop.diagnosis.cpu_pool import limiting, pool_of
from traintop.diagnosis.model import Evidence
from traintop.diagnosis.stats import mean_of
from traintop.diagnosis.text import pct

THROTTLED_SHARE = 0.2  # the quota stopped the job in this share of its periods or more
SPARE_SHARE = 0.9  # a limited job using less than this share of its CPUs has some to spare


@dataclass(frozen=True, slots=True)
class JobCpus:
    """What one rank may use: its pool's CPUs (``total``) shared by ``ranks`` judged ranks."""

    total: float
    ranks: int
    host: int
    limit: CpuLimit | None  # the cgroup's limit, where it gives fewer CPUs than the host

    @property
    def cpus(self) -> float:
        """The rank's share."""
        return self.total / max(1, self.ranks)

    @property
    def words(self) -> str:
        """``8 logical CPUs``, ``the job's 1.0 CPU: cgroup quota``, ``... shared by 2 ranks``."""
        if self.limit is None:
            return f"{self.host} logical CPUs"
        shared = f", shared by {self.ranks} ranks" if self.ranks > 1 else ""
        return f"the job's {amount(self.limit)}: {source(self.limit)}{shared}"


def amount(limit: CpuLimit) -> str:
    """``1.0 CPU``, ``2.5 CPUs`` (a quota), ``4 CPUs`` (a cpuset)."""
    cpus = limit.cpus
    if limit.quota_cpus is not None and limit.quota_cpus <= cpus:
        return f"{cpus:.1f} CPU" + ("" if cpus <= 1.0 else "s")
    return f"{cpus:.0f} CPU" + ("" if cpus == 1 else "s")


def source(limit: CpuLimit) -> str:
    """What sets the limit: the quota when it binds, else the cpuset."""
    binds = limit.quota_cpus is not None and limit.quota_cpus <= limit.cpus
    return "cgroup quota" if binds else "cgroup cpuset"


def job_cpus(ctx: Context) -> JobCpus:
    """The CPUs this rank may use (the host's when no cgroup limits it, or in system mode)."""
    return once(ctx, "cpus", _job_cpus)


def _job_cpus(ctx: Context) -> JobCpus:
    host = ctx.box.logical_cpus
    limit = ctx.job.job.cpu_limit if ctx.job else None
    if limit is None or not limiting(limit):
        return JobCpus(float(host), ctx.box.pools.get("", ctx.box.local_jobs), host, None)
    ranks = ctx.box.pools.get(pool_of(ctx.job.job), 1) if ctx.job else 1
    return JobCpus(min(float(host), limit.cpus), ranks, host, limit)


def throttled_share(ctx: Context) -> float | None:
    """The share of its quota periods the job was throttled in, over the window."""
    rows = ctx.job.steps.rows if ctx.job else ()
    return mean_of(r.cpu_limit.throttled_share for r in rows if r.cpu_limit is not None)


def throttling(ctx: Context) -> CpuLimit | None:
    """The job's limit where its quota stops it in a fifth of its periods or more: it wants
    more CPU than the container gives, whatever the host's cores do (None: it does not)."""
    limit = job_cpus(ctx).limit
    if limit is None or limit.quota_cpus is None:
        return None
    share = throttled_share(ctx)
    return limit if share is not None and share >= THROTTLED_SHARE else None


def throttled(ctx: Context) -> tuple[Evidence, ...]:
    """The evidence of :func:`throttling`: the quota, the host's CPUs, how often it stops."""
    limit = throttling(ctx)
    share = throttled_share(ctx) if limit is not None else None
    if limit is None or share is None:
        return ()
    text = f"{_whose(ctx)} cgroup quota of {amount(limit)} (the host has {ctx.box.logical_cpus})"
    text += f" throttled it in {pct(share)} of its periods"
    seconds = limit.throttled_s_per_s
    if seconds is not None and seconds > 0:
        text += f", {seconds:.2f} s a second"
    return (Evidence(text, "cpu_throttled_share", share, "cpu"),)


def _whose(ctx: Context) -> str:
    """ "the job's", or "rank 2's" for one rank of several (its quota may be its own)."""
    job = ctx.job.job if ctx.job else None
    return f"rank {job.rank}'s" if job is not None and job.world_size > 1 else "the job's"


def quota_note(ctx: Context) -> str:
    """``: the job's cgroup quota (1.0 CPU) throttles them``, where it does: said after a
    figure of waiting for a CPU, which a throttled thread reads as too."""
    limit = throttling(ctx)
    return f": the job's cgroup quota ({amount(limit)}) throttles them" if limit else ""


def job_cpu_used(ctx: Context) -> float | None:
    """CPUs the job's trainer and workers use (window means; 1.0 = one CPU)."""
    procs = [p for p in (ctx.trainer, *ctx.workers) if p is not None and p.cpu_pct is not None]
    return sum(p.cpu_pct or 0.0 for p in procs) / 100.0 if procs else None


def limit_spent(ctx: Context) -> bool:
    """The job has used up what its cgroup gives: throttled, or using nearly all its CPUs."""
    cpus = job_cpus(ctx)
    if cpus.limit is None:
        return False
    used = job_cpu_used(ctx)
    return throttling(ctx) is not None or (used is not None and used >= SPARE_SHARE * cpus.total)
