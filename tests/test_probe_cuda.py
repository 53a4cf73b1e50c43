"""GPU step timing and allocator sampling, driven by fake CUDA events (no GPU needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from traintop.cuda_timing import (
    FLAG_GPU_VALID,
    FLAG_MEM_VALID,
    CudaStepStats,
    MemorySampler,
    StepGpuTimer,
)


class FakeGpu:
    """A stream whose events complete only when the test says the GPU got there."""

    def __init__(self) -> None:
        self.events: list[FakeEvent] = []
        self.capturing = False

    def new_event(self) -> FakeEvent:
        self.events.append(FakeEvent(len(self.events)))
        return self.events[-1]

    def finish_all(self) -> None:
        for event in self.events:
            event.done = event.recorded


class FakeEvent:
    def __init__(self, number: int) -> None:
        self.number, self.recorded, self.done = number, False, False
        self.gpu_ms = 2.5 * number

    def record(self) -> None:
        self.recorded = True

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.done and end.done, "elapsed_time on an unfinished event"
        return end.gpu_ms - self.gpu_ms

    def synchronize(self) -> None:
        raise AssertionError("the probe must never synchronize")


def test_every_kth_step_is_timed_and_reported_later_with_its_lag() -> None:
    gpu = FakeGpu()
    timer = StepGpuTimer(gpu.new_event, every=4)
    results = {step: timer.at_boundary(step) for step in range(4)}  # step 4 starts timed
    assert all(r is None for r in results.values()) and len(gpu.events) == 1
    assert timer.at_boundary(4) is None  # end event recorded, GPU not there yet
    assert timer.at_boundary(5) is None
    gpu.finish_all()
    assert timer.at_boundary(6) == (2_500_000, 2)  # step 4's GPU time, reported at step 6


def test_queue_is_bounded_while_the_gpu_lags() -> None:
    gpu = FakeGpu()
    timer = StepGpuTimer(gpu.new_event, every=1, max_pending=2)
    for step in range(10):
        timer.at_boundary(step)
    assert len(gpu.events) <= 2 * 2 + 1  # no unbounded growth of pending events


def test_graph_capture_skips_event_recording() -> None:
    gpu = FakeGpu()
    timer = StepGpuTimer(gpu.new_event, every=1, capturing=lambda: gpu.capturing)
    gpu.capturing = True
    for step in range(5):
        timer.at_boundary(step)
    assert gpu.events == []


def test_memory_is_sampled_once_per_interval() -> None:
    reads = iter(range(100, 200))
    sampler = MemorySampler(lambda: next(reads), interval_ns=1_000)
    assert [sampler.sample(t) for t in (0, 500, 999, 1000, 1500, 2100)] == [
        100, None, None, 101, None, 102
    ]  # fmt: skip


def test_stats_combine_flags() -> None:
    gpu = FakeGpu()
    stats = CudaStepStats(StepGpuTimer(gpu.new_event, every=1), MemorySampler(lambda: 4096))
    assert stats.at_step(0, 0) == (0, 0, 4096, FLAG_MEM_VALID)
    gpu.finish_all()
    stats.at_step(1, 10)
    gpu.finish_all()
    gpu_ns, lag, mem, flags = stats.at_step(2, 20)
    assert flags == FLAG_GPU_VALID and lag == 1 and gpu_ns == 2_500_000 and mem == 0


def test_a_failing_cuda_call_disables_only_gpu_stats(capsys) -> None:
    def broken() -> int:
        raise RuntimeError("CUDA error: device lost")

    stats = CudaStepStats(StepGpuTimer(FakeGpu().new_event), MemorySampler(broken))
    assert stats.at_step(0, 0) == (0, 0, 0, 0)
    assert stats.at_step(1, 10**10) == (0, 0, 0, 0)
    assert capsys.readouterr().err.count("GPU timing disabled") == 1


@pytest.mark.slow  # a Python that imports torch
def test_detect_is_none_without_torch_and_on_cpu_torch() -> None:
    code = (
        "from traintop import cuda_timing\n"
        "assert cuda_timing.detect() is None\n"
        "import torch\n"
        "torch.ones(2) * 2\n"
        "assert cuda_timing.detect() is None\n"
        "assert not torch.cuda.is_initialized()\n"  # detect() never initialises CUDA itself
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
