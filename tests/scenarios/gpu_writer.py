"""A scripted GPU trainer: a real process that writes ring records shaped like one bottleneck.

There is no GPU on the test machine, so the GPU side comes from the fake NVML and this process
plays the training loop: it steps at a realistic rate (20 steps/s), spends each step's wall
time in named phases, reports the GPU busy time a CUDA-event probe would have measured
(``gpu_ns``) and really burns or idles its CPU the way such a trainer would, so the process
collector measures true CPU figures for it.

``python -m tests.scenarios.gpu_writer CASE [--seconds S] [--rate STEPS_PER_S]`` prints the
segment path once it exists, steps for S seconds, then closes the segment.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass

from traintop.ring import FLAG_GPU_VALID, FLAG_MEM_VALID, MEM_CUDA_ALLOCATED, RingWriter

GIB = 1 << 30
BATCH = 64


@dataclass(frozen=True)
class Shape:
    """One step of a case: phase weights, GPU busy share (None: no CUDA timing at all), the
    share of the step the trainer's CPU is busy, and the bytes its tensors hold on the GPU."""

    phases: tuple[tuple[str, float], ...]
    gpu_share: float | None
    cpu_share: float
    allocated_bytes: int = 0


TRAIN = (("data", 0.04), ("forward", 0.34), ("backward", 0.50), ("optimizer", 0.12))
CASES: dict[str, Shape] = {
    # The device is the limit: kernels back to back, the host mostly waits in the allocator.
    "compute": Shape(TRAIN, gpu_share=0.94, cpu_share=0.3, allocated_bytes=52 * GIB),
    # Tensors fill the card: same healthy step, allocations at the edge of out-of-memory.
    "memory": Shape(TRAIN, gpu_share=0.93, cpu_share=0.3, allocated_bytes=int(77.8 * GIB)),
    # A `loss.item()` every step: the host blocks, then the GPU waits for the next launch.
    "sync_stall": Shape(
        (
            ("data", 0.04),
            ("forward", 0.18),
            ("backward", 0.22),
            ("optimizer", 0.06),
            ("loss_item", 0.50),
        ),
        gpu_share=0.38,
        cpu_share=0.12,
        allocated_bytes=30 * GIB,
    ),
    # Python launches kernels one by one: the trainer pegs a core, the GPU idles between them.
    "host_overhead": Shape(TRAIN, gpu_share=0.42, cpu_share=1.0, allocated_bytes=12 * GIB),
    # The model never reached the GPU: steps run on the CPU, nothing is timed on the device.
    "idle": Shape(TRAIN, gpu_share=None, cpu_share=0.6),
}


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
    if shape.gpu_share is not None:
        flags |= FLAG_GPU_VALID
        gpu_ns = int(step_ns * shape.gpu_share * random.uniform(0.97, 1.03))
    writer.record(step, t0, phase_ns, BATCH, gpu_ns=min(gpu_ns, step_ns),
                  mem_bytes=shape.allocated_bytes, flags=flags)  # fmt: skip


def run(case: str, seconds: float, rate: float) -> None:
    """Step for ``seconds`` at about ``rate`` steps/s, each step 5 % jittered."""
    shape = CASES[case]
    names = tuple(name for name, _ in shape.phases)
    writer = RingWriter.create(name=f"train_{case}", phases=names, mem_kind=MEM_CUDA_ALLOCATED)
    if not writer.enabled:
        raise SystemExit("gpu_writer: could not create a ring segment")
    print(writer.path, flush=True)
    deadline = time.monotonic() + seconds
    step = 0
    while time.monotonic() < deadline:
        t0 = time.monotonic_ns()
        _spend(random.uniform(0.95, 1.05) / rate, shape.cpu_share)
        _record(writer, shape, step, t0, time.monotonic_ns() - t0)
        step += 1
    writer.close()


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
