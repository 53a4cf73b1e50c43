"""Input-pipeline rules: the job waits for batches, and why (CPU, storage or parallelism).

Attach mode sees the wait directly (the data phase's share of the step).  System mode only sees
an underused GPU, so it names a data cause only when CPU or storage is visibly saturated.
"""

from __future__ import annotations

from traintop.diagnosis import remedies
from traintop.diagnosis.context import Context
from traintop.diagnosis.findings import candidate
from traintop.diagnosis.model import Candidate, Evidence
from traintop.diagnosis.signals import (
    LOADER_CROWDED_PCT,
    cpu_saturated,
    data_wait,
    data_wait_evidence,
    gpu_lost_share,
    gpu_underused,
    io_bound,
    loader_cpu_pct,
    nic_busy,
    no_workers,
    trainer_pegged,
    workers_saturated,
)
from traintop.diagnosis.text import pct


def _starving(ctx: Context) -> tuple[tuple[Evidence, ...], float]:
    """Evidence that the device waits for input, and the share of time that costs."""
    if ctx.mode == "attach":
        return data_wait_evidence(ctx), data_wait(ctx) or 0.0
    return gpu_underused(ctx), gpu_lost_share(ctx)


def _cpu_evidence(ctx: Context) -> tuple[Evidence, ...]:
    """Loading is CPU-bound: saturated workers, a saturated host on which the loaders get a
    slice (sleeping loaders on a host others fill are not short of CPU), or a pegged trainer
    doing the loading itself (num_workers=0)."""
    host = cpu_saturated(ctx)
    if ctx.mode == "attach" and (loader_cpu_pct(ctx) or 0.0) < LOADER_CROWDED_PCT:
        host = ()
    found = workers_saturated(ctx) + host
    if found or ctx.mode == "system":
        return found
    inline, pegged = no_workers(ctx), trainer_pegged(ctx)
    return inline + pegged if inline and pegged else ()


def data_io(ctx: Context) -> Candidate | None:
    """Batches wait on storage: iowait, or a disk both busy and queueing."""
    starving, lost = _starving(ctx)
    io = io_bound(ctx) if starving else ()
    if not io:
        return None
    return candidate(
        ctx,
        "data_io",
        strength=0.9,
        severity="warning",
        summary=f"Input pipeline limited by storage: {pct(lost)} of time lost",
        evidence=starving + io,
        remedies=remedies.data_io(ctx),
        lost=lost,
    )


def data_cpu(ctx: Context) -> Candidate | None:
    """Batches wait on CPU work (decode, augmentation) and storage is not the cause."""
    starving, lost = _starving(ctx)
    if not starving:
        return None
    cpu = _cpu_evidence(ctx)
    if not cpu or io_bound(ctx):
        return None
    spare = not cpu_saturated(ctx)
    return candidate(
        ctx,
        "data_cpu",
        strength=0.9,
        severity="warning",
        summary=f"Input pipeline limited by CPU: {pct(lost)} of time lost",
        evidence=starving + cpu,
        remedies=remedies.data_cpu(ctx, spare),
        lost=lost,
    )


def data_starved(ctx: Context) -> Candidate | None:
    """Batches are late although neither CPU nor storage is full: too little parallelism or
    latency-bound fetches.  In system mode this is a guess, made only when no other
    explanation (saturation, a pegged trainer, a busy NIC) is visible, and marked as such."""
    starving, lost = _starving(ctx)
    if not starving or io_bound(ctx) or _cpu_evidence(ctx):
        return None
    if ctx.mode == "system" and (trainer_pegged(ctx) or nic_busy(ctx)):
        return None
    strength = 0.85 if ctx.mode == "attach" else 0.45
    note = "" if ctx.mode == "attach" else " (likely; attach the job to confirm)"
    return candidate(
        ctx,
        "data_starved",
        strength=strength,
        severity="warning",
        summary=f"Input pipeline too slow with CPU and disk to spare{note}",
        evidence=starving + _worker_facts(ctx),
        remedies=remedies.data_starved(ctx),
        lost=lost,
    )


def _worker_facts(ctx: Context) -> tuple[Evidence, ...]:
    """Context for the starved case: how many workers there are and how idle they sit."""
    loads = [w.cpu_pct for w in ctx.workers if w.cpu_pct is not None]
    if not loads:
        return ()
    mean = sum(loads) / len(loads)
    text = f"{len(loads)} workers averaging {mean:.0f} % CPU"
    return (Evidence(text, "worker_cpu_pct", mean, "dataloader"),)
