"""A scripted GPU trainer: a real process that writes ring records shaped like one bottleneck.

There is no GPU on the test machine, so the GPU side comes from the fake NVML (the card's own
counters: utilization, the trainer's per-process SM share, GPM) and this process plays the
training loop: it steps at a realistic rate (20 steps/s), spends each step's wall time in named
phases, reports the span a CUDA-event probe would have measured (``gpu_ns``: time with work
queued on the GPU, not busy), really burns or idles its CPU the way such a trainer would, so the
process collector measures true CPU figures for it, and keeps the probe's facts side file
beside its segment (``<name>.facts``, docs/ring-format.md): what the job does (autocast, compile,
optimizer, loaders), the lines where it syncs and how often, the allocator's retries, and one
profiled step, rewritten whole every 2 s as the probe's helper thread does.

``python -m tests.scenarios.gpu_writer CASE [--seconds S] [--rate STEPS_PER_S]`` prints the
segment path once it exists, steps for S seconds, then closes the segment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from traintop.ring import FLAG_GPU_VALID, FLAG_MEM_VALID, MEM_CUDA_ALLOCATED, RingWriter
from traintop.ring_paths import side_path

PROFILED_NS = time.monotonic_ns()  # the scripted profile was taken as the writer started

GIB = 1 << 30
BATCH = 64
FACTS_EVERY_S = 2.0

# What a small GPT in bf16 autocast with fused AdamW and flash attention does, not compiled,
# no DataLoader (it pins and copies its own batches): the H200 job.
GPT = {
    "device": "cuda", "autocast": "bf16", "compiled": False, "cuda_graphs": False,
    "optimizers": [{"name": "AdamW", "fused": True, "foreach": None}], "loaders": [],
    "has_conv": False, "channels_last": None, "tf32_matmul": True, "tf32_cudnn": True,
    "attention": "flash", "pinned_copies": True,
}  # fmt: skip
# The same model compiled, fed by a DataLoader that pins and keeps its workers.
COMPILED = GPT | {
    "compiled": True,
    "loaders": [{"num_workers": 4, "pin_memory": True, "persistent_workers": True,
                 "prefetch_factor": 2, "batch_size": BATCH}],
}  # fmt: skip


@dataclass(frozen=True)
class Shape:
    """One step of a case: phase weights, the share of the step with GPU work queued (the
    CUDA-event span; None: no CUDA timing at all), the share of the step the trainer's CPU is
    busy, the bytes its tensors hold on the GPU, and what the facts side file says (None:
    no side file, an older probe)."""

    phases: tuple[tuple[str, float], ...]
    queued_share: float | None
    cpu_share: float
    allocated_bytes: int = 0
    facts: dict | None = None
    syncs: tuple[dict, ...] = ()  # sync sites, "per_step" instead of a count
    profile: dict | None = None  # one profiled step (GpuStepProfile's fields but age)
    retries_per_step: float = 0.0


TRAIN = (("data", 0.04), ("forward", 0.34), ("backward", 0.50), ("optimizer", 0.12))
SYNC_PHASES = (
    ("data", 0.04), ("forward", 0.18), ("backward", 0.22), ("optimizer", 0.06), ("loss_item", 0.50),
)  # fmt: skip
ITEM = {"file": "/home/ana/gpt/train.py", "line": 123, "function": "train", "kind": "item",
        "code": "loss_sum += loss.item()"}  # fmt: skip
LOG_ITEM = {"file": "/home/ana/gpt/train.py", "line": 151, "function": "train", "kind": "item",
            "code": "print(f'loss {loss.item():.3f}')"}  # fmt: skip
LAUNCH_PROFILE = {
    "step": 200, "step_s": 0.062, "kernel_share": 0.61, "host_wait_share": 0.31,
    "sync_share": 0.01, "kernel_wait_share": 0.04, "other_share": 0.03, "kernels": 2840,
    "median_kernel_us": 9.0, "launch_us_p50": 6.0, "pageable_copies": 0, "attention": "flash",
    "every_s": 300.0, "cost_share": 0.0004,
}  # fmt: skip
SYNC_PROFILE = LAUNCH_PROFILE | {
    "kernel_share": 0.63, "host_wait_share": 0.04, "sync_share": 0.29, "kernel_wait_share": 0.01,
    "other_share": 0.03, "kernels": 1210, "median_kernel_us": 41.0,
}  # fmt: skip
COMPUTE_PROFILE = LAUNCH_PROFILE | {
    "kernel_share": 0.95, "host_wait_share": 0.02, "sync_share": 0.0, "kernel_wait_share": 0.02,
    "other_share": 0.01, "kernels": 410, "median_kernel_us": 310.0,
}  # fmt: skip
CASES: dict[str, Shape] = {
    # The device is the limit: kernels back to back, the host mostly waits in the allocator.
    "compute": Shape(TRAIN, queued_share=0.99, cpu_share=0.3, allocated_bytes=52 * GIB),
    # Tensors fill the card: same healthy step, allocations at the edge of out-of-memory.
    "memory": Shape(TRAIN, queued_share=0.99, cpu_share=0.3, allocated_bytes=int(77.8 * GIB)),
    # The allocator retries a cudaMalloc every few steps: the card is full, its cache flushed.
    "memory_retries": Shape(TRAIN, queued_share=0.99, cpu_share=0.3, allocated_bytes=70 * GIB,
                            facts=GPT, retries_per_step=0.25),
    # `loss.item()` after each of four micro-batches: the host blocks, the queue drains, the
    # GPU waits for the next launch.  The CUDA events still span the whole step.
    "sync_stall": Shape(SYNC_PHASES, queued_share=0.99, cpu_share=0.12, allocated_bytes=30 * GIB,
                        facts=GPT, syncs=(ITEM | {"per_step": 4.0},), profile=SYNC_PROFILE),
    # Python launches small kernels one by one: the training thread pegs a core, the GPU idles
    # between them while the span covers the whole step (the small GPT on the H200).
    "host_overhead": Shape(TRAIN, queued_share=0.99, cpu_share=1.0, allocated_bytes=12 * GIB,
                           facts=GPT, profile=LAUNCH_PROFILE),
    # Already in bf16 autocast and compiled, fused AdamW, a pinned persistent DataLoader.
    "compute_tuned": Shape(TRAIN, queued_share=0.99, cpu_share=0.3, allocated_bytes=48 * GIB,
                           facts=COMPILED, profile=COMPUTE_PROFILE),
    # Healthy, with a `loss.item()` print every tenth step: a sync too rare to matter.
    "compute_logging": Shape(TRAIN, queued_share=0.99, cpu_share=0.3, allocated_bytes=40 * GIB,
                             facts=COMPILED, syncs=(LOG_ITEM | {"per_step": 0.1},)),
    # Healthy, with the training thread spinning on its core (CUDA spins while it waits on a
    # deep queue): a busy thread beside a busy card is not launch-bound.
    "compute_spinning": Shape(TRAIN, queued_share=0.99, cpu_share=1.0, allocated_bytes=40 * GIB,
                              facts=GPT),
    # The model never reached the GPU: steps run on the CPU, nothing is timed on the device.
    "idle": Shape(TRAIN, queued_share=None, cpu_share=0.6),
}  # fmt: skip


def _spend(seconds: float, cpu_share: float) -> None:
    """Burn the CPU for ``cpu_share`` of ``seconds``, sleep through the rest."""
    start = time.perf_counter()
    burn_until = start + seconds * cpu_share
    while time.perf_counter() < burn_until:
        pass
    rest = start + seconds - time.perf_counter()
    if rest > 0:
        time.sleep(rest)


def _record(writer: RingWriter, shape: Shape, step: int, t0: int, step_ns: int) -> None:
    """One record for a step that really took ``step_ns``, split by the case's weights."""
    phase_ns = [int(step_ns * weight) for _, weight in shape.phases]
    phase_ns[-1] += step_ns - sum(phase_ns)
    flags = FLAG_MEM_VALID if shape.allocated_bytes else 0
    gpu_ns = 0
    if shape.queued_share is not None:
        flags |= FLAG_GPU_VALID
        gpu_ns = int(step_ns * shape.queued_share * random.uniform(0.99, 1.01))
    writer.record(step, t0, phase_ns, BATCH, gpu_ns=min(gpu_ns, step_ns),
                  mem_bytes=shape.allocated_bytes, flags=flags)  # fmt: skip


def facts_document(shape: Shape, steps: int) -> dict:
    """The side file's content after ``steps`` steps: counts since the start, as the probe
    keeps them (the collector turns them into rates over its window)."""
    sync = [
        {k: v for k, v in site.items() if k != "per_step"}
        | {"count": int(site["per_step"] * steps)}
        for site in shape.syncs
    ]
    return {
        "v": 1,
        "taken_ns": time.monotonic_ns(),
        "steps": steps,
        "facts": shape.facts,
        "sync": sync,
        "alloc_retries": int(shape.retries_per_step * steps),
        "profile": None if shape.profile is None else shape.profile | {"taken_ns": PROFILED_NS},
    }


def write_facts(path: Path, document: dict) -> None:
    """Rewrite the side file whole: a temporary name, then rename, mode 0600."""
    tmp = path.with_name(f".tmp-{path.name}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(document, out)
    os.replace(tmp, path)


def run(case: str, seconds: float, rate: float) -> None:
    """Step for ``seconds`` at about ``rate`` steps/s, each step 5 % jittered."""
    shape = CASES[case]
    names = tuple(name for name, _ in shape.phases)
    writer = RingWriter.create(name=f"train_{case}", phases=names, mem_kind=MEM_CUDA_ALLOCATED)
    if not writer.enabled:
        raise SystemExit("gpu_writer: could not create a ring segment")
    print(writer.path, flush=True)
    facts = side_path(Path(writer.path), ".facts") if shape.facts is not None else None
    deadline = time.monotonic() + seconds
    step, next_facts = 0, 0.0
    try:
        while time.monotonic() < deadline:
            t0 = time.monotonic_ns()
            _spend(random.uniform(0.95, 1.05) / rate, shape.cpu_share)
            _record(writer, shape, step, t0, time.monotonic_ns() - t0)
            step += 1
            if facts is not None and time.monotonic() >= next_facts:
                write_facts(facts, facts_document(shape, step))
                next_facts = time.monotonic() + FACTS_EVERY_S
    finally:
        writer.close()
        if facts is not None:
            with contextlib.suppress(OSError):
                facts.unlink()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpu_writer", description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--rate", type=float, default=20.0, help="steps per second")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rate <= 0:
        parser.error("--seconds and --rate must be positive")
    run(args.case, args.seconds, args.rate)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
