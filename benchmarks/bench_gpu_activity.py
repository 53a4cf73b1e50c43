"""What each of the card's activity calls costs per tick, against the compiled fake NVML.

Prints microseconds per call (median of ``--rounds`` timed batches) for the calls
``collectors/gpu_activity.py`` makes once per GPU per tick, through the real pynvml wrappers, and
the whole GPU tick of one H100 with and without them.  On the fake this is pynvml's and ctypes'
share only: the driver's own cost must be measured on a card (benchmarks/gpu_check.py does).

    python -m benchmarks.bench_gpu_activity [--rounds 7] [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

import pynvml as nv

from tests.fakenvml.build import build_fake_nvml
from tests.fakenvml.control import FakeNvml
from traintop.collectors.gpu import GpuCollector
from traintop.collectors.gpu_activity import gpm_request

PID = 41200


def _per_call_us(call: Callable[[], object], calls: int, rounds: int) -> float:
    timings = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        timings.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(timings)


def calls(handle, fake: FakeNvml) -> dict[str, Callable[[], object]]:
    """One closure per NVML call the activity sources make, each answering with data."""
    a, b = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
    nv.nvmlGpmSampleGet(handle, a)
    fake.set_time(1.0)
    nv.nvmlGpmSampleGet(handle, b)
    get = gpm_request(nv)
    get.sample1, get.sample2 = a, b
    return {
        "nvmlDeviceGetSamples (2 calls)": lambda: nv.nvmlDeviceGetSamples(handle, 1, 0),
        "nvmlDeviceGetProcessesUtilizationInfo (2 calls)":
            lambda: nv.nvmlDeviceGetProcessesUtilizationInfo(handle, 0),
        "nvmlGpmSampleGet": lambda: nv.nvmlGpmSampleGet(handle, b),
        "nvmlGpmMetricsGet (4 metrics)": lambda: nv.nvmlGpmMetricsGet(get),
        "nvmlDeviceGetUtilizationRates (reference)":
            lambda: nv.nvmlDeviceGetUtilizationRates(handle),
    }  # fmt: skip


def tick_us(fake: FakeNvml, rounds: int, ticks: int, activity: bool) -> float:
    """One GPU's whole tick through GpuCollector, with the activity sources or without."""
    collector = GpuCollector(nv)
    collector.collect()
    if not activity:
        for gpu in collector._gpus:  # the tick as it was before these sources
            gpu.activity.read = lambda now, mig: ({}, None)
    clock = [1.0]

    def one() -> None:
        clock[0] += 1.0
        fake.set_time(clock[0])
        collector.collect()

    us = _per_call_us(one, ticks, rounds)
    collector.close()
    return us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    fake = FakeNvml(build_fake_nvml(tempfile.mkdtemp(prefix="bench-fakenvml-")))
    fake.reset(1)
    fake.directive("0 set util.gpu 90", "0 set gpm.sm_active 70", f"0 proc {PID} 1073741824",
                   f"0 procutil {PID} 88 30", "0 procutil 41300 3 1")  # fmt: skip
    fake.set_time(0.0)
    fake.install(nv)
    nv.nvmlInit()
    handle = nv.nvmlDeviceGetHandleByIndex(0)
    print(f"per call, median of {args.rounds} x {args.calls} (fake NVML, this box):")
    for name, call in calls(handle, fake).items():
        print(f"  {name:<52} {_per_call_us(call, args.calls, args.rounds):8.2f} us")
    ticks = max(1, args.calls // 10)
    base = tick_us(fake, args.rounds, ticks, activity=False)
    full = tick_us(fake, args.rounds, ticks, activity=True)
    print(f"one H100 tick: {base:.1f} us without the activity sources, {full:.1f} us with them "
          f"(+{full - base:.1f} us)")  # fmt: skip
    nv.nvmlShutdown()
    FakeNvml.uninstall(nv)


if __name__ == "__main__":
    main()
