"""Why the GPU idles inside the steps: waiting on the host's next launch, or drained by a sync.

The card's counters say how much of the time no kernel ran (:mod:`traintop.diagnosis.busy`);
they cannot say why.  Two causes leave a GPU idle while its input is on time:

* **launch-bound** (``host_overhead``): the training thread issues kernels one by one, each a
  few µs of Python and driver work, and small kernels finish faster than the next arrives;
* **sync stalls** (``sync_stall``): the host waits for the GPU (``.item()``, a blocking copy,
  ``torch.cuda.synchronize()``), the queue drains, and the GPU idles until the host has done
  whatever follows and launched again.

Where a step was profiled, its idle time is split as Holistic Trace Analysis splits it (the
next kernel's launch call came after the GPU drained: host wait; the gap after a sync: sync;
gaps under 30 µs between back-to-back kernels: the launch overhead itself, booked with the host
wait), and that split is applied to the counters' idle share: the counters say how much, the
profile says why.  HTA books the time the host spent waiting for its next batch as host wait
too, so the data wait (the data rules' time) is taken off the host part first.  Without a
profile, the probe's sync hook counts the syncs per step at each line.  Lines that sync at least
once a step drain the queue every step, so the gap is theirs: a training thread that runs all
the time is no evidence against it, since CUDA spins the waiting thread on a CPU (the default
schedule while there are more CPUs than GPU contexts).  With no such line, a thread that runs
(or queues for a CPU) nearly all the time is launching; one that sleeps waits on something the
hook does not see (where the probe keeps no sync ledger at all, an older probe: a sync, the old
guess).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from traintop.collectors.snapshot import GpuStepProfile, SyncSite
from traintop.diagnosis.busy import Busy, working
from traintop.diagnosis.context import Context, once
from traintop.diagnosis.signals import data_wait
from traintop.diagnosis.text import pct

PROFILE_MAX_AGE_S = 900.0  # a profiled step this old still shows the job's shape
SYNCS_PER_STEP = 1.0  # at least one sync a step at the named lines makes every step drain
SHOWN_SITES = 3
KINDS = {
    "item": ".item()",
    "copy": "a blocking copy to the CPU",
    "nonzero": ".nonzero()",
    "synchronize": "torch.cuda.synchronize()",
    "event": "Event.synchronize()",
    "stream": "Stream.synchronize()",
}


@dataclass(frozen=True, slots=True)
class IdleSplit:
    """The share of the time the GPU idles for the host (the data wait taken off), and the
    parts of it the host's launches and its syncs explain (shares of the time)."""

    idle: float
    host: float
    sync: float
    busy: Busy
    profile: GpuStepProfile | None  # where the split comes from; None: inferred


def fresh_profile(ctx: Context) -> GpuStepProfile | None:
    """The job's profiled step, when it is recent enough to describe it."""
    profile = ctx.job.job.gpu_profile if ctx.job else None
    if profile is None or profile.age_s > PROFILE_MAX_AGE_S or profile.step_s <= 0.0:
        return None
    return profile


def syncs_per_step(ctx: Context) -> float | None:
    """Syncs a step at every line the hook saw; None where the probe keeps no sync ledger (it
    writes no facts: an older probe), so that none seen is not read as none made."""
    if ctx.job is None or ctx.job.job.facts is None:
        return None
    return sum(site.per_step for site in ctx.job.job.sync_sites)


def idle_split(ctx: Context, launching: bool) -> IdleSplit | None:
    """The split of the GPU's idle time (None: no busy share from the card, or no job).
    ``launching``: the training thread is on a CPU or queued for one nearly all the time."""
    busy = working(ctx)
    if ctx.job is None or busy is None:
        return None
    wait = data_wait(ctx) or 0.0
    idle = max(0.0, busy.idle - wait)
    profile = fresh_profile(ctx)
    if profile is not None:
        return _measured(idle, wait, busy, profile)
    syncs = syncs_per_step(ctx)
    if syncs is not None and syncs >= SYNCS_PER_STEP:
        return IdleSplit(idle, 0.0, idle, busy, None)  # counted syncs drain it every step
    if launching:
        return IdleSplit(idle, idle, 0.0, busy, None)
    return IdleSplit(idle, 0.0, idle if syncs is None else 0.0, busy, None)


def _measured(idle: float, wait: float, busy: Busy, p: GpuStepProfile) -> IdleSplit:
    """The counters' idle share split in the profiled step's proportions."""
    host = max(0.0, p.host_wait_share + p.kernel_wait_share - wait)
    parts = host + p.sync_share + p.other_share
    if parts <= 0.0:
        return IdleSplit(idle, 0.0, 0.0, busy, p)
    return IdleSplit(idle, idle * host / parts, idle * p.sync_share / parts, busy, p)


def profile_text(p: GpuStepProfile) -> str:
    """``a profiled step (#12000, 40 s ago, 31 ms): kernels 64 %, the GPU waiting on the host's
    launches 30 %, on syncs 2 %, other 4 %``."""
    idle = [
        ("on the host's launches", p.host_wait_share + p.kernel_wait_share),
        ("on syncs", p.sync_share),
        ("other", p.other_share),
    ]
    parts = ", ".join(f"{words} {pct(share)}" for words, share in idle if share >= 0.005)
    head = f"a profiled step (#{p.step}, {p.age_s:.0f} s ago, {p.step_s * 1000:.0f} ms):"
    return f"{head} kernels {pct(p.kernel_share)}" + (f", the GPU waiting {parts}" if parts else "")


def launch_text(p: GpuStepProfile) -> str | None:
    """``2,840 kernel launches a step, median kernel 9 µs, a launch costs the CPU 6 µs``."""
    if p.kernels <= 0:
        return None
    text = f"{p.kernels:,} kernel launches a step"
    if p.median_kernel_us is not None:
        text += f", median kernel {p.median_kernel_us:.0f} µs"
    if p.launch_us_p50 is not None:
        text += f", a launch costs the CPU {p.launch_us_p50:.0f} µs"
    return text


def times(per_step: float) -> str:
    """``×4`` a step, ``×0.5`` (one every other step)."""
    return f"×{per_step:.0f}" if per_step >= 1.0 else f"×{per_step:.1f}"


def site_name(site: SyncSite) -> str:
    """``train.py:123 `loss.item()```: the line and what it runs."""
    what = site.code or KINDS.get(site.kind, site.kind)
    return f"{os.path.basename(site.file)}:{site.line} `{what}`"


def sites(ctx: Context) -> tuple[SyncSite, ...]:
    """The sync sites a step makes, most per step first."""
    return once(ctx, "sites", _sites)


def _sites(ctx: Context) -> tuple[SyncSite, ...]:
    found = ctx.job.job.sync_sites if ctx.job else ()
    return tuple(sorted(found, key=lambda s: -s.per_step))
