"""What to do about a cgroup quota that throttles the job, and what it buys.

Raise the quota to what the job's next bound needs (the loader model finds it, in steps of half a
CPU), and run no more DataLoader workers than it feeds: more only queue for it, each holding a
copy of the dataset.
"""

from __future__ import annotations

from traintop.diagnosis import gains
from traintop.diagnosis.context import Context
from traintop.diagnosis.job_cpus import amount, job_cpus, throttling
from traintop.diagnosis.model import Gain

WHERE = "docker --cpus, Kubernetes resources.limits.cpu, Slurm --cpus-per-task"


def limit_remedies(ctx: Context, workers: bool) -> tuple[str | Gain, ...]:
    """Raise the quota (to the value the model finds, with its gain), and (``workers``) lower
    the workers to what it feeds; nothing where no quota throttles the job."""
    limit = throttling(ctx)
    if limit is None:
        return ()
    new = gains.quota_target(ctx)
    head = f"raise the job's CPU limit (its cgroup quota is {amount(limit)})"
    if new is None:
        first: str | Gain = f"{head}: {WHERE}"
    else:
        first = gains.raise_quota(ctx, f"{head} to {new:.1f} CPUs: {WHERE}", new)
    fit = max(1, int(job_cpus(ctx).cpus))
    now = len(ctx.workers)
    if not workers or now <= fit:
        return (first,)
    fewer = f"lower DataLoader num_workers from {now} to {fit}: more workers than the quota's"
    fewer += f" {amount(limit)} only queue for it, and each holds a copy of the dataset"
    return (first, gains.fewer_workers(ctx, fewer, fit))
