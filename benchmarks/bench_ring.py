"""Ring buffer figures measured in one run: writer cost, reader cost, a frozen monitor's effect
on the writer, 8-job collector load.

Run: python benchmarks/bench_ring.py   (uses a temporary TRAINTOP_RING_DIR)
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from traintop.collectors.jobs import JobCollector
from traintop.collectors.ring_reader import open_segment
from traintop.ring import RingWriter

REPO = Path(__file__).resolve().parents[1]
PHASES = ("data", "forward", "backward", "optimizer", "other")
BATCH = 2000


def _median_ns(batch, rounds: int = 200) -> float:
    """Median over ``rounds`` of the mean ns per call in ``batch(BATCH)`` (a loop, no wrapper)."""
    samples = []
    for _ in range(rounds):
        t = time.perf_counter_ns()
        batch(BATCH)
        samples.append((time.perf_counter_ns() - t) / BATCH)
    return statistics.median(samples)


def bench_writer(directory: str) -> RingWriter:
    w = RingWriter.create(name="bench", phases=PHASES, directory=directory)
    phases, t0, record, clock = (1, 2, 3, 4, 5), time.monotonic_ns(), w.record, time.perf_counter_ns

    def records(n: int) -> None:
        for _ in range(n):
            record(1, t0, phases, 32)

    def timer_pairs(n: int) -> None:
        for _ in range(n):
            clock()
            clock()

    per_record, timer_pair = _median_ns(records), _median_ns(timer_pairs)
    print(f"writer record(): {per_record:.0f} ns median  (target <= 500 ns)")
    print(f"bare perf_counter_ns() pair: {timer_pair:.0f} ns  ratio {per_record / timer_pair:.1f}x")
    return w


def bench_reader(w: RingWriter) -> None:
    seg = open_segment(w.path)
    runs = []
    for _ in range(200):
        t = time.perf_counter_ns()
        block = seg.last(4096)
        runs.append((time.perf_counter_ns() - t) / 1000)
    t = time.perf_counter_ns()
    rows = list(block)
    rows_us = (time.perf_counter_ns() - t) / 1000
    print(
        f"reader last({len(block)}) validated: {statistics.median(runs):.0f} us median"
        f"  (target <= 100 us); + materialising {len(rows)} Record tuples: {rows_us:.0f} us"
    )


_POLLER = """import sys
from traintop.collectors.ring_reader import open_segment
segment = open_segment(sys.argv[1])
print("ok", flush=True)
while True:
    segment.poll()
    segment.liveness()
"""


def _records_per_s(w: RingWriter, seconds: float = 1.0) -> float:
    record, phases, clock = w.record, (1, 2, 3, 4, 5), time.monotonic
    count, end = 0, clock() + seconds
    while clock() < end:
        for _ in range(1000):
            record(count, count, phases, 32)
            count += 1
    return count / seconds


def bench_frozen_monitor(directory: str) -> None:
    """Writer throughput alone, with a monitor polling flat out, SIGSTOPped, then SIGKILLed."""
    w = RingWriter.create(name="frozen", phases=PHASES, directory=directory)
    rates = {"no monitor": _records_per_s(w)}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    reader = subprocess.Popen([sys.executable, "-c", _POLLER, str(w.path)], env=env,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    reader.stdout.readline()
    rates["monitor polling flat out"] = _records_per_s(w)
    reader.send_signal(signal.SIGSTOP)
    rates["monitor SIGSTOPped"] = _records_per_s(w)
    reader.kill()
    reader.wait()
    rates["monitor SIGKILLed"] = _records_per_s(w)
    w.close()
    print("writer throughput (records/s, 1 s each, one process shares 2 cores with the monitor):")
    for name, rate in rates.items():
        print(f"  {name:26s} {rate / 1e6:5.2f} M/s")


def _trainer(directory: str, seconds: float, rate: int) -> None:
    """Paced like a real trainer: sleeps between bursts instead of spinning on a shared CPU."""
    w = RingWriter.create(name="job", phases=PHASES, directory=directory)
    start, burst = time.monotonic(), rate // 100
    for i in range(0, int(seconds * rate), burst):
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
        for k in range(i, i + burst):
            w.record(k, time.monotonic_ns(), (1000, 2000, 3000, 4000, 5000), 32)
    w.close()


def bench_collector(directory: str, jobs: int = 8, rate: int = 2000, seconds: float = 6.0) -> None:
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_trainer, args=(directory, seconds, rate)) for _ in range(jobs)]
    for p in procs:
        p.start()
    col = JobCollector(directory, window_s=10.0)
    ticks = []
    while any(p.is_alive() for p in procs):
        t = time.perf_counter()
        snaps = col.collect()
        ticks.append(time.perf_counter() - t)
        time.sleep(0.5)
    snaps = col.collect()
    got = sorted(s.steps_total for s in snaps if s.name == "job")
    lost = sum(s.lost_records for s in snaps)
    print(
        f"{jobs} writers x {rate} steps/s target, collector every 0.5 s: records lost {lost}"
        f", steps seen per job {got[0]}..{got[-1]}, collect() median"
        f" {statistics.median(ticks) * 1000:.1f} ms, max {max(ticks) * 1000:.1f} ms"
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        w = bench_writer(f"{tmp}/w")
        bench_reader(w)
        w.close()
        bench_frozen_monitor(f"{tmp}/f")
        bench_collector(f"{tmp}/c")


if __name__ == "__main__":
    main()
