"""How busy the job's GPU is by the card's own counters; the CUDA-event span as what it is.

The probe's CUDA events at a step's two ends measure how long the GPU's timeline for the step
was, every gap in which the GPU waited for the host included: the time work was *queued*, an
upper bound of busy (99 % on a small GPT that NVML saw 57-68 % busy).  The card's counters say
how much of the time a kernel ran: NVML's per-process SM utilization for the job's processes
(``gpu_busy_source`` "process"), else the utilization of the GPUs it holds ("device"), else,
where a step was profiled, its kernel time ("profile").  Those are the busy share every rule
judges and every sentence shows; the span is only ever said as "queued".

A share the card's own utilization contradicts is never shown: a process cannot be busier than
its device, so a job share more than ``CONTRADICTION`` above the device's utilization over the
same window (a recording from before the card's truth, whose share is the span) gives way to
the device's figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from traintop.diagnosis.context import Context, once
from traintop.diagnosis.model import Evidence
from traintop.diagnosis.signals import GPU_IDLE_PCT, gpu_underused
from traintop.diagnosis.text import pct, pct100

CONTRADICTION = 0.10  # a shown busy share never sits further than this above the card's own
GAP_MIN = 0.2  # the GPU idles at least this share of the time: worth a finding
QUEUED_GAP = 0.1  # queued beyond busy by this much: the gaps fall inside the steps
SOURCES = {
    "process": "NVML, the job's processes",
    "device": "NVML utilization",
    "profile": "kernel time of a profiled step",
}


@dataclass(frozen=True, slots=True)
class Busy:
    """The share of the time a kernel of the job ran on its GPUs (0..1), where that comes from,
    the device's own utilization and the share of the step work was queued (None: unknown)."""

    share: float
    source: str
    device: float | None
    queued: float | None

    @property
    def idle(self) -> float:
        return max(0.0, 1.0 - self.share)


def gpu_busy(ctx: Context) -> Busy | None:
    """The job's busy share by the card's counters (system mode: its GPUs' utilization)."""
    return once(ctx, "busy", _busy)


def _busy(ctx: Context) -> Busy | None:
    if not ctx.gpus:
        return None
    device = ctx.gpu_util_pct / 100.0 if ctx.gpu_util_pct is not None else None
    job = ctx.job
    queued = job.gpu_queued_share if job else None
    source = job.job.gpu_busy_source if job else None
    share = job.gpu_busy_share if job and source in SOURCES else None
    if job is not None and source not in SOURCES and job.gpu_busy_share is not None:
        queued = queued if queued is not None else job.gpu_busy_share  # an older collector's span
    if share is not None and (device is None or share <= device + CONTRADICTION):
        return Busy(min(1.0, share), source or "device", device, queued)
    if device is None:
        return None
    return Busy(min(1.0, device), "device", device, queued)


def busy_text(busy: Busy, only: bool = False) -> str:
    """``GPU busy 62 % of the time (NVML, the job's processes)``, and the device's figure when
    other processes keep it busier than the job does."""
    word = "busy only" if only else "busy"
    text = f"GPU {word} {pct(busy.share)} of the time ({SOURCES[busy.source]}"
    device = busy.device
    if device is not None and device > busy.share + CONTRADICTION and busy.source != "device":
        text += f"; the card {pct(device)} busy with other processes' work too"
    return text + ")"


def busy_evidence(busy: Busy, only: bool = False) -> Evidence:
    return Evidence(busy_text(busy, only), "gpu_busy_share", busy.share, "gpu")


def queued_evidence(busy: Busy) -> tuple[Evidence, ...]:
    """``work queued on the GPU 99 % of the step (CUDA events): the gaps fall inside it`` where
    the span says more than busy: the GPU had the step's work and waited between its kernels."""
    if busy.queued is None or busy.queued - busy.share < QUEUED_GAP:
        return ()
    text = f"work queued on the GPU {pct(busy.queued)} of the step (CUDA events): it idles"
    text += f" {pct(busy.queued - busy.share)} of it between kernels"
    return (Evidence(text, "gpu_queued_share", busy.queued, "training"),)


def gpu_gaps(ctx: Context) -> tuple[Evidence, ...]:
    """The job's GPUs idle a meaningful share of the time by the card's counters; in system
    mode, a utilization that is low or swings (idle gaps between bursts)."""
    if ctx.job is None:
        return gpu_underused(ctx) if ctx.gpus else ()
    busy = working(ctx)
    if busy is None or busy.idle < GAP_MIN:
        return ()
    return (busy_evidence(busy, only=True),)


def working(ctx: Context) -> Busy | None:
    """The busy share of GPUs that do work at all: one under 5 % is the idle rule's case (the
    model is not on it, or the job stopped), not a gap between kernels."""
    busy = gpu_busy(ctx)
    if busy is None or (busy.device is not None and busy.device * 100.0 < GPU_IDLE_PCT):
        return None
    return busy


def gpu_lost_share(ctx: Context) -> float:
    """Share of the time the job's GPUs run no kernel, by the card's counters."""
    busy = gpu_busy(ctx)
    return busy.idle if busy is not None else 0.0


_GPM = (
    ("SMs {} active", "sm_active_pct"),
    ("warps {} of the SMs' maximum", "sm_occupancy_pct"),
    ("tensor cores {}", "tensor_active_pct"),
    ("memory bandwidth {}", "dram_active_pct"),
)


def gpm_evidence(ctx: Context) -> tuple[Evidence, ...]:
    """What the SMs do while a kernel runs (GPM, Hopper and newer): ``SMs 40 % active, tensor
    cores 10 %, memory bandwidth 30 %``; nothing where the card has no GPM."""
    if all(g.sm_active_pct is None and g.tensor_active_pct is None for g in ctx.gpus):
        return ()  # no GPM on these cards
    found: list[tuple[str, str, float]] = []
    for label, field in _GPM:
        value = gpm_mean(ctx, field)
        if value is not None:
            found.append((label, field, value))
    if not found:
        return ()
    text = ", ".join(label.format(pct100(v)) for label, _, v in found)
    return (Evidence(text, f"gpu_{found[0][1]}", found[0][2], "gpu"),)


def gpm_mean(ctx: Context, field: str) -> float | None:
    """One GPM counter's mean over the job's GPUs (None: no GPM)."""
    values = [getattr(g, field) for g in ctx.gpus if getattr(g, field) is not None]
    return sum(values) / len(values) if values else None
