"""What slows a straggler, read where it can be: what only that rank has.

A rank with the same work as its peers that takes longer than they do is given less: fewer CPU
cycles (its cgroup's quota throttles it, its cpuset is narrower, the host's other work queues
it), or a slower GPU (one that throttles its clocks, or runs them lower).  Each is measured per
rank already (collectors/cgroup.py, schedstat, NVML), so the straggler's evidence compares it
with its peers and says the difference; a figure every rank shares explains no straggler.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from traintop.diagnosis.context import Context, RankResult
from traintop.diagnosis.job_cpus import THROTTLED_SHARE, amount, throttled_share
from traintop.diagnosis.model import Evidence
from traintop.diagnosis.network_signals import cpu_delay
from traintop.diagnosis.reasons import HW_BITS, POWER_BITS, THERMAL_BITS, label
from traintop.diagnosis.text import pct

QUEUE_GAP = 0.2  # it waited for a CPU a fifth of the time more than its peers
CLOCK_GAP = 0.9  # its GPU's SM clock under 90 % of its peers'
REASON_SHARE = 0.3  # a throttle reason active this share of the samples (the throttle rules')


def what_slows(slow: RankResult, results: Sequence[RankResult]) -> tuple[Evidence, ...]:
    """The straggler's differences from its peers that slow it: quota, cpuset, CPU queueing,
    its GPU's clocks; none where it has none of them."""
    peers = [r for r in results if r is not slow]
    if not peers:
        return ()
    quota = _quota(slow, peers)
    queued = None if quota is not None else _queued(slow, peers)  # a throttled rank queues
    found = (quota, _cpuset(slow, peers), queued, _gpu(slow, peers))
    return tuple(e for e in found if e is not None)


def slow_remedies(slow: RankResult, slows: tuple[Evidence, ...]) -> tuple[str, ...]:
    """What to change about what only the straggler has."""
    rank, metrics = slow.job.rank, {e.metric for e in slows}
    found = []
    if "straggler.cpu_throttled_share" in metrics and slow.job.cpu_limit is not None:
        found.append(f"raise rank {rank}'s CPU limit to its peers' (its cgroup quota is "
                     f"{amount(slow.job.cpu_limit)}): docker --cpus, Kubernetes "
                     "resources.limits.cpu, Slurm --cpus-per-task")  # fmt: skip
    if "straggler.cpus" in metrics:
        found.append(f"give rank {rank} as many CPUs as its peers (its cpuset: taskset, "
                     "docker --cpuset-cpus, Slurm --cpus-per-task)")  # fmt: skip
    if "straggler.cpu_wait_share" in metrics:
        found.append(f"move other work off rank {rank}'s CPUs, or pin the ranks to cores apart")
    if "straggler.sm_clock_mhz" in metrics:
        found.append(f"look at rank {rank}'s GPU: cooling, power limit (nvidia-smi -q -d "
                     "PERFORMANCE), or swap it")  # fmt: skip
    return tuple(found)


def _quota(slow: RankResult, peers: list[RankResult]) -> Evidence | None:
    """Its quota throttles it while its peers' do not bind them as much."""
    limit = slow.job.cpu_limit
    share = throttled_share(slow.ctx)
    if limit is None or limit.quota_cpus is None or share is None or share < THROTTLED_SHARE:
        return None
    theirs = [r.job.cpu_limit.quota_cpus if r.job.cpu_limit else None for r in peers]
    if all(q is not None and q <= limit.quota_cpus for q in theirs):
        return None  # the same quota everywhere: not what sets it apart
    others = "none" if all(q is None for q in theirs) else _quotas(theirs)
    text = (f"rank {slow.job.rank}'s cgroup quota of {amount(limit)} (the other ranks': "
            f"{others}) throttled it in {pct(share)} of its periods")  # fmt: skip
    return Evidence(text, "straggler.cpu_throttled_share", share, "cpu")


def _quotas(quotas: list[float | None]) -> str:
    words = sorted({"none" if q is None else f"{q:.1f} CPU" for q in quotas})
    return ", ".join(words)


def _cpus_of(result: RankResult) -> int:
    limit = result.job.cpu_limit
    if limit is not None and limit.cpuset is not None:
        return len(limit.cpuset)
    return result.ctx.box.logical_cpus


def _cpuset(slow: RankResult, peers: list[RankResult]) -> Evidence | None:
    mine, theirs = _cpus_of(slow), min(_cpus_of(r) for r in peers)
    if mine >= theirs:
        return None
    text = f"rank {slow.job.rank} may run on {mine} CPU{'s' if mine > 1 else ''} (its cpuset), "
    text += f"the other ranks on {theirs}"
    return Evidence(text, "straggler.cpus", float(mine), "cpu")


def _queued(slow: RankResult, peers: list[RankResult]) -> Evidence | None:
    """Its threads queued for a CPU far more than its peers' (the host's other work)."""
    mine = cpu_delay(slow.ctx.trainer)
    theirs = median(cpu_delay(r.ctx.trainer) for r in peers)
    if mine - theirs < QUEUE_GAP:
        return None
    text = (f"rank {slow.job.rank}'s threads waited for a CPU {pct(mine)} of the time, the "
            f"other ranks' {pct(theirs)}")  # fmt: skip
    return Evidence(text, "straggler.cpu_wait_share", mine, "processes")


def _clock(ctx: Context) -> float | None:
    clocks = [g.sm_clock_mhz for g in ctx.gpus if g.sm_clock_mhz is not None]
    return sum(clocks) / len(clocks) if clocks else None


def _gpu(slow: RankResult, peers: list[RankResult]) -> Evidence | None:
    """Its GPU runs its SMs slower than its peers' (a throttle reason says why, if set)."""
    mine = _clock(slow.ctx)
    theirs = [c for r in peers if (c := _clock(r.ctx)) is not None]
    if mine is None or not theirs or mine >= CLOCK_GAP * median(theirs):
        return None
    which = ", ".join(str(g.index) for g in slow.ctx.gpus)
    reasons = _reasons(slow.ctx)
    text = (f"rank {slow.job.rank}'s GPU {which} ran its SMs at {mine:.0f} MHz, the other "
            f"ranks' at {median(theirs):.0f} MHz{reasons}")  # fmt: skip
    return Evidence(text, "straggler.sm_clock_mhz", mine, "gpu")


def _reasons(ctx: Context) -> str:
    bits = (*THERMAL_BITS, *POWER_BITS, *HW_BITS)
    active = {label(b) for g in ctx.gpus for b, share in g.reason_share.items()
              if b in bits and share >= REASON_SHARE}  # fmt: skip
    return f" ({', '.join(sorted(active))})" if active else ""
