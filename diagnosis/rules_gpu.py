"""Device rules: clocks held down (thermal, power), memory pressure, and an idle GPU.

Throttle findings need the NVML reason bits: a hot GPU with no reason bit set runs at full
clocks and is not throttled, whatever its temperature.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

from traintop.collectors.snapshot import JobSnapshot
from traintop.diagnosis import remedies
from traintop.diagnosis.context import Context
from traintop.diagnosis.findings import candidate
from traintop.diagnosis.model import Candidate, Evidence
from traintop.diagnosis.reasons import HW_BITS, HW_SLOWDOWN, POWER_BITS, THERMAL_BITS, label
from traintop.diagnosis.text import gib, pct
from traintop.diagnosis.views import GpuView

THROTTLE_SHARE = 0.3  # a reason must be active in this share of samples
THROTTLE_MIN_UTIL_PCT = 30.0  # idle GPUs lower their clocks on purpose
HOT_MARGIN_C = 5.0  # HW slowdown within this of the slowdown threshold counts as thermal
HOT_FALLBACK_C = 85.0  # when the driver reports no thresholds
GPU_MEM_FULL = 0.95  # advisory: reserved memory is often a cache, not live tensors
GPU_MEM_NEAR_OOM = 0.98  # ... a warning once the card is this full ...
TENSORS_SHARE = 0.9  # ... and the job's allocated tensors alone take this share of it
NEAR_OOM_RANK = 0.02  # ranks above healthy compute (0.01), below any measured time loss
SWAP_BYTES_PER_S = 1 << 20


def _hot(g: GpuView) -> bool:
    """Is the GPU near the temperature where the hardware slows it down?"""
    if g.temp_c is None:
        return False
    limit = g.temp_slowdown_c or g.temp_max_operating_c
    return g.temp_c >= (limit - HOT_MARGIN_C if limit is not None else HOT_FALLBACK_C)


def _active(g: GpuView, bits: tuple[int, ...]) -> list[int]:
    return [b for b in bits if g.reason_share.get(b, 0.0) >= THROTTLE_SHARE]


def thermal_bits(g: GpuView) -> list[int]:
    """Thermal reasons in force; HW slowdown joins them when the GPU is hot."""
    return _active(g, THERMAL_BITS) + (_active(g, (HW_SLOWDOWN,)) if _hot(g) else [])


def power_bits(g: GpuView) -> list[int]:
    """Power reasons in force; HW slowdown joins them when the GPU is not hot."""
    return _active(g, POWER_BITS) + ([] if _hot(g) else _active(g, (HW_SLOWDOWN,)))


def _clock_deficit(g: GpuView) -> float | None:
    if g.sm_clock_mhz is None or not g.sm_clock_max_mhz:
        return None
    return max(0.0, 1.0 - g.sm_clock_mhz / g.sm_clock_max_mhz)


def _reason_fact(g: GpuView, bits: list[int]) -> Evidence:
    share = max(g.reason_share[b] for b in bits)
    names = " + ".join(label(b) for b in bits)
    text = f"GPU {g.index}: {names} active in {pct(share)} of samples"
    return Evidence(text, f"gpu.{g.index}.clocks_event_reasons", float(sum(bits)), "gpu")


def temp_fact(g: GpuView) -> Evidence | None:
    """``GPU 3 at 84 °C, slowdown at 89 °C (5 °C below)``."""
    if g.temp_c is None:
        return None
    text = f"GPU {g.index} at {g.temp_c:.0f} °C"
    limit = g.temp_slowdown_c or g.temp_max_operating_c
    if limit is not None:
        gap = limit - g.temp_c
        side = f"{abs(gap):.0f} °C {'below' if gap > 0 else 'above'}" if gap else "at it"
        kind = "slowdown" if g.temp_slowdown_c else "max operating"
        text += f", {kind} at {limit:.0f} °C ({side})"
    return Evidence(text, f"gpu.{g.index}.temp_c", g.temp_c, "gpu")


def power_fact(g: GpuView) -> Evidence | None:
    """``GPU 0 power 398 W of 400 W limit (99 %)``."""
    if g.power_w is None or not g.power_limit_w:
        return None
    share = g.power_w / g.power_limit_w
    text = f"GPU {g.index} power {g.power_w:.0f} W of {g.power_limit_w:.0f} W limit ({pct(share)})"
    return Evidence(text, f"gpu.{g.index}.power_w", g.power_w, "gpu")


def clock_fact(g: GpuView) -> Evidence | None:
    """``SM clock 1410 of 1980 MHz (71 %)``."""
    if g.sm_clock_mhz is None or not g.sm_clock_max_mhz:
        return None
    share = g.sm_clock_mhz / g.sm_clock_max_mhz
    text = f"GPU {g.index} SM clock {g.sm_clock_mhz:.0f} of {g.sm_clock_max_mhz:.0f} MHz"
    return Evidence(text + f" ({pct(share)})", f"gpu.{g.index}.sm_clock_mhz", g.sm_clock_mhz, "gpu")


def _throttle(
    ctx: Context, bottleneck: str, bits_of: Callable[[GpuView], list[int]], fact, fixes
) -> Candidate | None:
    """Shared shape of both throttle rules: reasons, the physical fact, the clock cost."""
    hits = [(g, bits_of(g)) for g in ctx.gpus if (g.util_pct or 0.0) >= THROTTLE_MIN_UTIL_PCT]
    hits = [(g, bits) for g, bits in hits if bits]
    if not hits:
        return None
    facts = [e for g, bits in hits for e in (_reason_fact(g, bits), fact(g), clock_fact(g)) if e]
    deficits = [_clock_deficit(g) for g, _ in hits]
    lost = max((d for d in deficits if d is not None), default=0.1)
    hw = any(b in HW_BITS for _, bits in hits for b in bits)
    kind = "temperature" if bottleneck == "throttle_thermal" else "power"
    gpus = ", ".join(str(g.index) for g, _ in hits)
    held = max(g.reason_share.get(b, 0.0) for g, bits in hits for b in bits)
    return candidate(
        ctx,
        bottleneck,
        severity="error" if hw else "warning",
        summary=f"GPU {gpus} clocks held down by {kind}: {pct(lost)} below max",
        evidence=facts,
        remedies=fixes,
        lost=max(lost, 0.02),
        steady=held,
    )


def throttle_thermal(ctx: Context) -> Candidate | None:
    """Clocks cut because the GPU is too hot."""
    return _throttle(ctx, "throttle_thermal", thermal_bits, temp_fact, remedies.THERMAL)


def throttle_power(ctx: Context) -> Candidate | None:
    """Clocks cut to stay under the power limit or because the platform braked."""
    return _throttle(ctx, "throttle_power", power_bits, power_fact, remedies.POWER)


def _gpu_mem_facts(ctx: Context) -> list[Evidence]:
    """``GPU 0 memory 99 % full (79.5 of 80.0 GiB)`` for every GPU of the job that is."""
    return [
        Evidence(
            f"GPU {g.index} memory {pct(g.mem_used_share)} full{_mem_bytes(g)}",
            f"gpu.{g.index}.mem",
            g.mem_used_share,
            "gpu",
        )
        for g in ctx.gpus
        if g.mem_used_share is not None and g.mem_used_share >= GPU_MEM_FULL
    ]


def _mem_bytes(g: GpuView) -> str:
    if g.mem_used_bytes is None or not g.mem_total_bytes:
        return ""
    return f" ({gib(g.mem_used_bytes)} of {gib(g.mem_total_bytes)})"


def near_oom(ctx: Context) -> Evidence | None:
    """The job's own tensors fill a GPU that is all but full: the next larger batch, longer
    sequence or fragmentation spike fails with out-of-memory.  A full card alone is not enough:
    PyTorch's cache, TensorFlow and JAX reserve memory they do not use."""
    alloc = ctx.job.job.cuda_mem_allocated_bytes if ctx.job else None
    full = [g for g in ctx.gpus if (g.mem_used_share or 0.0) >= GPU_MEM_NEAR_OOM]
    cards = [g.mem_total_bytes for g in full if g.mem_total_bytes]
    if alloc is None or not cards or alloc < TENSORS_SHARE * max(cards):
        return None
    text = f"the job's tensors take {gib(alloc)} ({pct(alloc / max(cards))} of the card)"
    return Evidence(text, "cuda_mem_allocated_bytes", float(alloc), "training")


def _steps_between(first: JobSnapshot, last: JobSnapshot) -> int:
    """The steps the job made between two counts of its retries: the probe's own step count
    written with them, where it was (the ring's runs ahead of the file by up to a write's
    interval, and the rate read 0.30 a step for 0.25); else the ring's."""
    if first.cuda_alloc_retries_steps is not None and last.cuda_alloc_retries_steps is not None:
        return last.cuda_alloc_retries_steps - first.cuda_alloc_retries_steps
    return last.steps_total - first.steps_total


def alloc_retries(ctx: Context) -> Evidence | None:
    """The caching allocator's retries rose over the window: a cudaMalloc failed, so it freed
    every cached block (a sync of every stream) and tried again.  The job runs at the edge of
    the card's memory, and each retry stalls it."""
    if ctx.job is None or ctx.job.job.cuda_alloc_retries is None:
        return None  # the probe counts none (no CUDA, or an older probe)
    rows = [r for r in ctx.job.steps.rows if r.cuda_alloc_retries is not None]
    if len(rows) < 2:
        return None
    first, last = rows[0], rows[-1]
    retries = (last.cuda_alloc_retries or 0) - (first.cuda_alloc_retries or 0)
    steps = _steps_between(first, last)
    if retries <= 0 or steps <= 0:
        return None
    text = f"the CUDA allocator retried {retries} times in {steps} steps ({retries / steps:.2f} a"
    text += " step): each retry frees the cache and waits for every stream"
    return Evidence(text, "cuda_alloc_retries_per_step", retries / steps, "training")


def memory(ctx: Context) -> Candidate | None:
    """A job at the edge of GPU out-of-memory (its tensors fill the card, or the allocator
    retries), or (advice only) a GPU whose memory is nearly all reserved.  The host's memory
    (swapping, a cgroup's limit) is ``host_memory``'s (traintop.diagnosis.rules_memory)."""
    retried = alloc_retries(ctx)
    if retried is not None:
        return _retrying(ctx, retried)
    facts = _gpu_mem_facts(ctx)
    tensors = near_oom(ctx)
    if tensors is not None:
        facts.append(tensors)
    if not facts:
        return None
    return candidate(
        ctx,
        "memory",
        severity="warning" if tensors else "info",
        summary=_memory_summary(tensors is not None),
        evidence=facts,
        remedies=remedies.memory(ctx),
        lost=NEAR_OOM_RANK if tensors else 0.0,
        explained=1.0,  # a full card is a state, measured, not a time
    )


def _memory_summary(tensors: bool) -> str:
    if tensors:
        return "GPU memory full of the job's tensors: one spike from OOM"
    return "GPU memory almost full: close to OOM"


def _retrying(ctx: Context, retried: Evidence) -> Candidate:
    """The allocator retries: a warning ranked above healthy compute (its cost is not timed),
    with the card's fill and the job's tensors where they are known."""
    tensors = near_oom(ctx)
    facts = [retried, *_gpu_mem_facts(ctx), *((tensors,) if tensors else ())]
    return candidate(
        ctx,
        "memory",
        severity="warning",
        summary="GPU memory at its edge: the CUDA allocator retries failed allocations",
        evidence=facts,
        remedies=remedies.alloc_retries(ctx),
        lost=NEAR_OOM_RANK,
        explained=1.0,
        steady=_retries_held(ctx),
    )


def _retries_held(ctx: Context) -> float:
    """The share of the window's summaries (after the first) in which the retries rose."""
    counts = [r.cuda_alloc_retries for r in (ctx.job.steps.rows if ctx.job else ())]
    pairs = [(a, b) for a, b in pairwise(counts) if a is not None and b is not None]
    return sum(b > a for a, b in pairs) / len(pairs) if pairs else 1.0
