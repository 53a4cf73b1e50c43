"""What CPU demand (run-queue waits and busy threads, ``traintop.collectors.schedstat``) adds to a
tick.

``python benchmarks/bench_schedstat.py [--trainers 3] [--threads 24] [--ticks 15]`` starts
``--trainers`` processes of ``--threads`` threads each (two of their threads spinning, the rest
asleep, as a torch trainer's pool between ops), then times ``ProcessCollector.collect()`` 1 s
apart, as the monitor does, in thread CPU time: the collector with scheduler statistics against
the baseline without them (``demand=False``), both in the same run, ticks interleaved.  Then
the same for one whole sample (8 fake H100s, host, processes, jobs: bench_monitor.py's figure),
back to back and 1 s apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from traintop.collectors.factory import build_collectors  # noqa: E402
from traintop.collectors.processes import ProcessCollector  # noqa: E402
from traintop.collectors.sampler import Sampler  # noqa: E402

TRAINER = """
import threading, time, sys
def spin():
    while True: sum(range(10000)); time.sleep(0.001)
for i in range(int(sys.argv[1]) - 1):
    threading.Thread(target=spin if i < 2 else time.sleep, args=() if i < 2 else (600,),
                     daemon=True).start()
time.sleep(600)
"""


def _tick_us(call: Callable[[], object]) -> float:
    started = time.thread_time_ns()
    call()
    return (time.thread_time_ns() - started) / 1000


def _interleaved(ticks: int, gap_s: float, demand: Callable, base: Callable) -> tuple[float, ...]:
    """Median µs of ``demand()`` and of ``base()``, called alternately ``gap_s`` apart."""
    demand(), base()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(ticks):
        time.sleep(gap_s)
        times[0].append(_tick_us(demand))
        times[1].append(_tick_us(base))
    return statistics.median(times[0]), statistics.median(times[1])


def _report(what: str, demand: float, base: float) -> None:
    extra, ratio = demand - base, demand / base
    print(f"{what}: {base:6.0f} µs without schedstat, {demand:6.0f} µs with ({ratio:.2f}x, "
          f"+{extra:.0f} µs = {extra / 1e4:.3f} % of a core at 1 s)")  # fmt: skip


def _full_sample(ticks: int) -> None:
    """bench_monitor.py's sample-cost figure, with and without scheduler statistics."""
    from bench_monitor import fake_nvml_env

    os.environ.update(fake_nvml_env())
    collectors = build_collectors()
    plain = dataclasses.replace(collectors, processes=ProcessCollector(demand=False))
    demand, base = Sampler(collectors).sample_once, Sampler(plain).sample_once
    _report("full sample, back to back  ", *_interleaved(200, 0.0, demand, base))
    _report("full sample, 1 s apart     ", *_interleaved(ticks, 1.0, demand, base))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=24)
    parser.add_argument("--ticks", type=int, default=15)
    opts = parser.parse_args()
    argv = [sys.executable, "-c", TRAINER, str(opts.threads)]
    trainers = [subprocess.Popen(argv) for _ in range(opts.trainers)]
    try:
        collector = ProcessCollector()
        base = ProcessCollector(demand=False).collect
        medians = _interleaved(opts.ticks, 1.0, collector.collect, base)
        rows = collector.collect()
        detailed = sum(r.threads_busy is not None for r in rows)
        print(f"{len(rows)} rows ({detailed} with per-thread figures), {opts.trainers} "
              f"trainers x {opts.threads} threads, medians of {opts.ticks} ticks, thread CPU "
              "time")  # fmt: skip
        _report("process collector, 1 s apart", *medians)
        _full_sample(opts.ticks)
    finally:
        for proc in trainers:
            proc.kill()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
