"""Device rules: clocks held down (thermal, power), memory pressure, and an idle GPU.

Throttle findings need the NVML reason bits: a hot GPU with no reason bit set runs at full
clocks and is not throttled, whatever its temperature.
"""

from __future__ import annotations

from collections.abc import Callable

from traintop.diagnosis import remedies
from traintop.diagnosis.context import Context
from traintop.diagnosis.findings import candidate
from traintop.diagnosis.model import Candidate, Evidence
from traintop.diagnosis.reasons import HW_BITS, HW_SLOWDOWN, POWER_BITS, THERMAL_BITS, label
from traintop.diagnosis.text import gib, pct, rate
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


def memory(ctx: Context) -> Candidate | None:
    """Host swapping (slows everything), a job at the edge of GPU out-of-memory, or (advice
    only) a GPU whose memory is nearly all reserved."""
    facts = _gpu_mem_facts(ctx)
    swap = ctx.box.swap_bytes_per_s
    swapping = swap is not None and swap >= SWAP_BYTES_PER_S
    if swap is not None and swapping:
        facts.insert(0, Evidence(f"host swapping {rate(swap)}", "swap_bytes_per_s", swap, "memory"))
    tensors = near_oom(ctx)
    if tensors is not None:
        facts.append(tensors)
    if not facts:
        return None
    severity = "error" if swapping else "warning" if tensors else "info"
    return candidate(
        ctx,
        "memory",
        severity=severity,
        summary=_memory_summary(swapping, tensors is not None),
        evidence=facts,
        remedies=remedies.memory(swapping),
        lost=0.5 if swapping else NEAR_OOM_RANK if tensors else 0.0,
        explained=0.5 if swapping else 1.0,  # a full card is a state, measured, not a time
    )


def _memory_summary(swapping: bool, tensors: bool) -> str:
    if swapping:
        return "Host is swapping"
    if tensors:
        return "GPU memory full of the job's tensors: one spike from OOM"
    return "GPU memory almost full: close to OOM"
