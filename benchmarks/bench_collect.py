"""Cost of the job collector per tick, by state: live ranks at a step rate, finished segments.

``python benchmarks/bench_collect.py [--jobs 8] [--ranks 8] [--rate 2000] [--finished 24]
[--ticks 10] [--profile]`` starts the writers (benchmarks/ring_load.py, one process per rank),
then takes ``--ticks`` samples 1 s apart as the monitor does: ``JobCollector.collect()`` and the
process scan it shares, each timed in thread CPU time.  The baseline in the same run is the
collector with no segment at all; ``--tree DIR`` measures another source tree (an older commit,
``git archive``d) for a before/after.  ``--profile`` prints cProfile's top functions of collect().
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LOAD = ROOT / "benchmarks" / "ring_load.py"


def start_jobs(directory: str, jobs: int, ranks: int, rate: float, seconds: float,
               prefix: str = "job") -> list[subprocess.Popen]:  # fmt: skip
    """``jobs`` launchers of ``ranks`` rank processes each, writing ``rate`` steps/s per rank."""
    common = ["--dir", directory, "--ranks", str(ranks), "--rate", str(rate)]
    return [
        subprocess.Popen(
            [
                sys.executable,
                str(LOAD),
                *common,
                "--seconds",
                str(seconds),
                "--name",
                f"{prefix}{j + 1}",
            ],
            start_new_session=True,
        )
        for j in range(jobs)
    ]


def finished_sweep(directory: str, runs: int) -> None:
    """``runs`` one-rank runs of a sweep that start, step briefly and finish cleanly."""
    procs = start_jobs(directory, runs, 1, 50.0, 1.0, prefix="sweep")
    for p in procs:
        p.wait()


def wait_for_segments(directory: str, count: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(list(Path(directory).glob("*.ring"))) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(list(Path(directory).glob('*.ring')))} of {count}")
        time.sleep(0.1)


def measure(directory: str, ticks: int, profile: bool) -> tuple[float, float, int]:
    """Median thread-CPU ms of collect() and of the process scan, over ``ticks`` 1 s ticks."""
    from collectors.jobs import JobCollector
    from collectors.processes import ProcessCollector

    procs, jobs = ProcessCollector(), JobCollector(directory)
    if hasattr(jobs, "share_process_scan"):  # a tree from before the shared scan (--tree)
        jobs.share_process_scan(procs)
    jobs.collect(), procs.collect()
    job_ms, proc_ms, prof = [], [], cProfile.Profile()
    for _ in range(ticks):
        time.sleep(1.0)
        t = time.thread_time_ns()
        procs.collect()
        t2 = time.thread_time_ns()
        if profile:
            prof.enable()
        snaps = jobs.collect()
        prof.disable()
        job_ms.append((time.thread_time_ns() - t2) / 1e6)
        proc_ms.append((t2 - t) / 1e6)
    if profile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(18)
    live = sum(s.state in ("live", "stalled") for s in snaps)
    return statistics.median(job_ms), statistics.median(proc_ms), live


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--finished", type=int, default=0)
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--tree", default=str(ROOT), help="source tree to measure (a baseline)")
    args = parser.parse_args()
    sys.path.insert(0, args.tree)
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    with tempfile.TemporaryDirectory(prefix="traintop-bench-") as tmp:
        ring = os.path.join(tmp, "ring")
        os.mkdir(ring, 0o700)
        base_ms, base_proc_ms, _ = measure(ring, 3, False)
        if args.finished:
            finished_sweep(ring, args.finished)
        live = args.jobs * args.ranks
        procs = start_jobs(ring, args.jobs, args.ranks, args.rate, args.ticks + 30)
        wait_for_segments(ring, args.finished + live)
        time.sleep(2.0)
        job_ms, proc_ms, seen = measure(ring, args.ticks, args.profile)
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
    print(f"no segment:  collect() {base_ms:.3f} ms, process scan {base_proc_ms:.2f} ms")
    print(f"{seen} live ranks at {args.rate:.0f} steps/s + {args.finished} finished: "
          f"collect() {job_ms:.2f} ms median, process scan {proc_ms:.2f} ms")  # fmt: skip
    if seen:
        per = (job_ms - base_ms) / seen
        print(f"collect() per live rank: {per:.3f} ms (target <= 0.2 ms at 2,000 steps/s)")
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
