"""The HTA split of a profiled step (traintop/hta_split.py), on synthetic traces shaped like
the real ones: a launch-bound step, a step stalled on ``.item()``, a GPU-bound step, a CUDA graph
replay, two streams overlapping, and the step window cutting through the trace."""

from __future__ import annotations

import math

import pytest

from traintop.hta_split import KERNEL_WAIT_NS, TraceEvent, attention_backend, split_step

US = 1_000  # ns


def kernel(
    start_us: float,
    dur_us: float,
    corr: int = 0,
    stream: int = 7,
    name: str = "void at::native::vectorized_elementwise_kernel",
) -> TraceEvent:
    return TraceEvent(
        "kernel", name, int(start_us * US), int((start_us + dur_us) * US), stream, corr
    )


def call(name: str, start_us: float, dur_us: float, corr: int = 0) -> TraceEvent:
    return TraceEvent("runtime", name, int(start_us * US), int((start_us + dur_us) * US), 0, corr)


def launched(start_us: float, launch_us: float, dur_us: float, corr: int, lag_us: float = 3.0):
    """A cudaLaunchKernel call and its kernel, which starts ``lag_us`` after the call returns
    or when the GPU gets to it (``start_us``), whichever is later."""
    at = max(start_us, launch_us + 5 + lag_us)
    return [call("cudaLaunchKernel", launch_us, 5, corr), kernel(at, dur_us, corr)]


def total(split) -> float:
    return (
        split.kernel_share
        + split.host_wait_share
        + split.sync_share
        + split.kernel_wait_share
        + split.other_share
    )


def test_a_launch_bound_step_is_mostly_host_wait() -> None:
    """Small kernels (4 µs) launched one every 15 µs: the GPU drains before each launch."""
    events = []
    for i in range(100):
        events += launched(start_us=0, launch_us=i * 15, dur_us=4, corr=i + 1)
    split = split_step(events, 0, 1500 * US)
    assert split.kernels == 100 and split.median_kernel_us == 4 and split.launch_us_p50 == 5
    assert split.joined == 1.0  # every kernel found its launch call
    assert split.kernel_share == pytest.approx(400 / 1500)
    assert split.host_wait_share > 0.6 and split.sync_share == 0 and split.other_share == 0
    assert math.isclose(total(split), 1.0)


def test_a_step_stalled_on_item_names_the_sync() -> None:
    """Kernels queued up to 900 µs, ``.item()`` waits for them (cudaMemcpyAsync then
    cudaStreamSynchronize), the host then works 400 µs before launching again."""
    events = [call("cudaLaunchKernel", 10 * i, 5, i + 1) for i in range(10)]
    events += [kernel(20 + 88 * i, 88, i + 1) for i in range(10)]  # busy 20..900
    copy = TraceEvent("memcpy", "Memcpy DtoH (Device -> Pageable)", 900 * US, 902 * US, 7, 50)
    events += [call("cudaMemcpyAsync", 110, 8, 50), copy]
    events += [call("cudaStreamSynchronize", 120, 790)]  # returns at 910, after the drain
    events += launched(start_us=0, launch_us=1310, dur_us=100, corr=60)
    split = split_step(events, 0, 1500 * US)
    assert split.sync_share == pytest.approx((1318 - 902) / 1500)
    assert split.host_wait_share == pytest.approx((20 + 1500 - 1418) / 1500)
    assert split.kernel_share == pytest.approx((882 + 100) / 1500)
    assert math.isclose(total(split), 1.0)


def test_a_gpu_bound_step_is_busy_and_its_gaps_are_kernel_waits_or_other() -> None:
    """Launches run far ahead; kernels back to back with 2 µs gaps, and one 50 µs gap the GPU
    spent waiting with work queued (an event from another stream): other, not host_wait."""
    events = [call("cudaLaunchKernel", i, 0.5, i + 1) for i in range(50)]
    start = 0.0
    for i in range(50):
        events.append(kernel(start, 100, i + 1))
        start += 102 if i != 25 else 150
    t1 = int(start * US)
    split = split_step(events, 0, t1)
    assert split.kernel_share == pytest.approx(5000 / start)
    assert split.kernel_wait_share == pytest.approx(49 * 2 / start - 2 / start)
    assert split.other_share == pytest.approx(50 / start)
    assert split.host_wait_share == pytest.approx(2 / start)  # the tail: nothing left queued
    assert 2 * US < KERNEL_WAIT_NS < 50 * US


def test_a_cuda_graph_replay_counts_one_launch_and_all_its_kernels() -> None:
    events = [call("cudaGraphLaunch", 0, 12, corr=900)]
    events += [kernel(20 + 11 * i, 10, corr=900) for i in range(60)]
    split = split_step(events, 0, 700 * US)
    assert split.graph_launches == 1 and split.kernels == 60
    assert split.launch_us_p50 is None  # no cudaLaunchKernel: the graph launched them
    assert split.kernel_wait_share == pytest.approx(59 / 700)  # queued by the graph
    assert split.host_wait_share == pytest.approx((20 + 700 - 679) / 700)


def test_two_overlapping_streams_count_their_union_once() -> None:
    events = [*launched(0, 0, 100, corr=1), *launched(0, 1, 150, corr=2)]
    events[3] = kernel(50, 150, corr=2, stream=13)  # stream 13 overlaps stream 7
    split = split_step(events, 0, 400 * US)
    assert split.kernel_share == pytest.approx((200 - 8) / 400)
    assert math.isclose(total(split), 1.0)


def test_the_window_cuts_kernels_that_cross_it() -> None:
    """A kernel queued by the step before runs into this one; another runs past its end."""
    events = [kernel(-50, 80, corr=1), *launched(0, 100, 500, corr=2)]
    split = split_step(events, 0, 300 * US)
    assert split.kernel_share == pytest.approx((30 + 300 - 108) / 300)
    assert split.kernels == 1  # only the one that started inside
    assert (
        split_step([kernel(10, 5, corr=3), *launched(0, 20, 5, corr=4)], 0, 99 * US).joined == 0.5
    )
    assert split.host_wait_share == pytest.approx(78 / 300)


def test_a_step_with_no_gpu_work_is_all_host_wait() -> None:
    split = split_step([], 0, 1000 * US)
    assert split.host_wait_share == 1 and split.kernels == 0 and split.median_kernel_us is None


def test_host_to_device_copies_are_counted_by_their_source_memory() -> None:
    copies = [
        TraceEvent("memcpy", "Memcpy HtoD (Pageable -> Device)", 10 * US, 20 * US, 7, 1),
        TraceEvent("memcpy", "Memcpy HtoD (Pinned -> Device)", 30 * US, 40 * US, 7, 2),
        TraceEvent("memcpy", "Memcpy HtoD (Pinned -> Device)", 50 * US, 60 * US, 7, 3),
        TraceEvent("memcpy", "Memcpy DtoH (Device -> Pageable)", 70 * US, 80 * US, 7, 4),
    ]
    split = split_step(copies, 0, 100 * US)
    assert (split.pageable_copies, split.pinned_copies) == (1, 2)


@pytest.mark.parametrize(
    ("events", "backend"),
    [
        ([TraceEvent("op", "aten::_scaled_dot_product_flash_attention", 0, 1)], "flash"),
        ([TraceEvent("op", "aten::_scaled_dot_product_efficient_attention", 0, 1)], "efficient"),
        ([TraceEvent("op", "aten::_scaled_dot_product_cudnn_attention", 0, 1)], "cudnn"),
        ([TraceEvent("op", "aten::_scaled_dot_product_attention_math", 0, 1)], "math"),
        ([kernel(0, 1, name="void pytorch_flash::flash_fwd_kernel<Traits>")], "flash"),
        ([kernel(0, 1, name="fmha_cutlassF_bf16_aligned_64x64_rf_sm80")], "efficient"),
        ([kernel(0, 1, name="cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma")], "cudnn"),
        ([TraceEvent("op", "aten::softmax", 0, 1), TraceEvent("op", "aten::bmm", 0, 1)], "manual"),
        ([TraceEvent("op", "aten::log_softmax", 0, 1)], None),  # a loss is not attention
        ([], None),
    ],
)
def test_the_attention_backend_comes_from_ops_then_kernels(events, backend) -> None:
    assert attention_backend(events) == backend
