"""One profiled step's wall time split the way Holistic Trace Analysis splits GPU idle time.

A pure function of a plain event list, so it is tested on synthetic traces (no GPU, no torch)
and runs in the training process on the probe's helper thread (``traintop.step_profiler``).

HTA (facebookresearch/HolisticTraceAnalysis, ``breakdown_analysis.py``) joins each kernel to the
runtime call that launched it (same correlation id) and classes the idle gap before it:
*host_wait* when the launch came after the GPU had drained (the CPU was late: launch-bound),
else *kernel_wait* when the gap is shorter than 30 µs (back-to-back kernels), else *other*.
Two changes make it fit a live monitor (docs/probe.md):

* The window is the step's wall time (the probe's step boundaries), not the trace's kernel
  span, and the gaps are those of the whole card (every stream merged): a share of the step.
* A gap the host spent blocked in a synchronising call (``cudaStreamSynchronize``,
  ``cudaDeviceSynchronize``, ``cudaEventSynchronize``, a blocking ``cudaMemcpy``) when the GPU
  drained is *sync* (TraceLens' "sync drain"): HTA would call it host_wait, but the remedy is
  to remove the sync, not to launch faster.

So ``busy + host_wait + sync + kernel_wait + other == 1`` of the step.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from statistics import median
from typing import NamedTuple

GPU_KINDS = frozenset({"kernel", "memcpy", "memset"})
KERNEL_WAIT_NS = 30_000  # HTA's consecutive_kernel_delay (30 trace units: µs in practice)
SYNC_SLACK_NS = 10_000  # CPU and GPU timestamps agree to a few µs, not to the ns
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel")
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")
SYNC_CALLS = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
)
BLOCKING_COPIES = frozenset({"cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cuMemcpy"})
# The SDPA backend an aten op (or, failing that, a kernel name) reveals.
ATTENTION_OPS = (
    ("_scaled_dot_product_flash_attention", "flash"),
    ("_flash_attention_", "flash"),
    ("_scaled_dot_product_efficient_attention", "efficient"),
    ("_efficient_attention_", "efficient"),
    ("_scaled_dot_product_cudnn_attention", "cudnn"),
    ("_cudnn_attention_", "cudnn"),
    ("_scaled_dot_product_attention_math", "math"),
    ("_scaled_dot_product_fused_attention_overrideable", "fused"),
)
# Kernel names, all markers of a row required: cuDNN's first (its SDPA kernels say "flash" too).
ATTENTION_KERNELS = (
    (("cudnn", "sdpa"), "cudnn"),
    (("flash_fwd",), "flash"),
    (("flash_bwd",), "flash"),
    (("fmha_cutlass",), "efficient"),
)
MANUAL_ATTENTION_OPS = frozenset({"aten::softmax", "aten::_softmax"})


class TraceEvent(NamedTuple):
    """One event of a profiled step, in ns on one clock.

    ``kind``: "kernel", "memcpy", "memset" (on the GPU; ``stream`` is its stream), "runtime" (a
    CUDA runtime or driver call on the CPU) or "op" (a CPU operator).  ``corr`` joins a GPU
    event to the runtime call that launched it (0: unknown).
    """

    kind: str
    name: str
    start_ns: int
    end_ns: int
    stream: int = 0
    corr: int = 0


class StepSplit(NamedTuple):
    """The split of ``[t0, t1]``: shares of the wall time, and what the step launched."""

    step_ns: int
    kernel_share: float
    host_wait_share: float
    sync_share: float
    kernel_wait_share: float
    other_share: float
    kernels: int  # kernels that started in the window
    median_kernel_us: float | None
    launch_us_p50: float | None  # CPU time of one launch call, median
    graph_launches: int
    pageable_copies: int  # host-to-device copies from pageable memory
    pinned_copies: int  # host-to-device copies from pinned memory
    joined: float | None  # of the kernels, those whose launch call is in the trace (a check)
    attention: str | None  # "flash", "efficient", "cudnn", "math", "fused", "manual" or None


def split_step(events: Iterable[TraceEvent], t0: int, t1: int) -> StepSplit:
    """Split the wall time ``[t0, t1]`` (ns, the events' clock) of one step; see the module."""
    events = sorted(events, key=lambda e: e.start_ns)
    gpu = [e for e in events if e.kind in GPU_KINDS]
    runtime = [e for e in events if e.kind == "runtime"]
    wall = max(1, t1 - t0)
    busy = _merged((max(e.start_ns, t0), min(e.end_ns, t1)) for e in gpu)
    idle = _classified_gaps(busy, gpu, runtime, t0, t1)
    kernels = [e for e in gpu if e.kind == "kernel" and t0 <= e.start_ns < t1]
    in_window = [e for e in runtime if t0 <= e.start_ns < t1]
    copies = [e.name for e in gpu if e.kind == "memcpy" and t0 <= e.start_ns < t1]
    return StepSplit(
        step_ns=t1 - t0,
        kernel_share=sum(b - a for a, b in busy) / wall,
        **{f"{k}_share": v / wall for k, v in idle.items()},
        kernels=len(kernels),
        median_kernel_us=_median_us(kernels),
        launch_us_p50=_median_us([e for e in in_window if e.name.startswith(LAUNCH_CALLS)]),
        graph_launches=sum(e.name.startswith(GRAPH_LAUNCHES) for e in in_window),
        pageable_copies=sum(_host_to_device(n) and "Pageable" in n for n in copies),
        pinned_copies=sum(_host_to_device(n) and "Pinned" in n for n in copies),
        joined=_joined(kernels, runtime),
        attention=attention_backend(events),
    )


def _merged(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of intervals (empty ones dropped), sorted."""
    merged: list[list[int]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _classified_gaps(
    busy: Sequence[tuple[int, int]],
    gpu: Sequence[TraceEvent],
    runtime: Sequence[TraceEvent],
    t0: int,
    t1: int,
) -> dict[str, int]:
    """ns of idle per class: every gap of ``busy`` inside ``[t0, t1]``, classed by the GPU
    event that ends it (the first to start at or after the gap's start)."""
    idle = {"host_wait": 0, "sync": 0, "kernel_wait": 0, "other": 0}
    launches = {e.corr: e for e in runtime if e.corr}
    syncs = [e for e in runtime if _is_sync(e.name)]
    starts = [e.start_ns for e in gpu]
    edges = [t0, *(x for interval in busy for x in interval), t1]
    for a, b in zip(edges[::2], edges[1::2], strict=True):
        if b > a:
            following = _first_from(gpu, starts, a)
            idle[_gap_class(a, b, following, launches, syncs, a == t0)] += b - a
    return idle


def _gap_class(
    a: int,
    b: int,
    following: TraceEvent | None,
    launches: dict[int, TraceEvent],
    syncs: Sequence[TraceEvent],
    leading: bool,
) -> str:
    """HTA's rule, with the sync class first (see the module).  The gap that opens the window
    has no drain before it: a launch made as the window opens or later is one it waited for."""
    if any(s.start_ns <= a + SYNC_SLACK_NS and s.end_ns >= a - SYNC_SLACK_NS for s in syncs):
        return "sync"
    launch = launches.get(following.corr) if following is not None and following.corr else None
    if following is None or (launch is not None and launch.start_ns + leading > a):
        return "host_wait"  # nothing was queued when the GPU drained: the host was late
    return "kernel_wait" if b - a < KERNEL_WAIT_NS else "other"


def _first_from(gpu: Sequence[TraceEvent], starts: Sequence[int], at: int) -> TraceEvent | None:
    index = bisect_left(starts, at)
    return gpu[index] if index < len(gpu) else None


def _joined(kernels: Sequence[TraceEvent], runtime: Sequence[TraceEvent]) -> float | None:
    calls = {e.corr for e in runtime if e.corr}
    return sum(k.corr in calls for k in kernels) / len(kernels) if kernels else None


def _is_sync(name: str) -> bool:
    return name.startswith(SYNC_CALLS) or name in BLOCKING_COPIES


def _host_to_device(name: str) -> bool:
    return "HtoD" in name or "Host -> Device" in name


def _median_us(events: Sequence[TraceEvent]) -> float | None:
    return median(e.end_ns - e.start_ns for e in events) / 1000 if events else None


def attention_backend(events: Sequence[TraceEvent]) -> str | None:
    """The SDPA backend the step ran (from its aten ops, else its kernel names); "manual" for a
    softmax with no SDPA op (attention written by hand); None when nothing shows attention."""
    for event in events:
        if event.kind == "op":
            for marker, backend in ATTENTION_OPS:
                if marker in event.name:
                    return backend
    for event in events:
        if event.kind == "kernel":
            for markers, backend in ATTENTION_KERNELS:
                if all(marker in event.name for marker in markers):
                    return backend
    manual = any(e.kind == "op" and e.name in MANUAL_ATTENTION_OPS for e in events)
    return "manual" if manual else None
