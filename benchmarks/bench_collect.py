"""Cost of the job collector per tick, by state: live ranks at a step rate, finished segments.

``python benchmarks/bench_collect.py [--jobs 8] [--ranks 8] [--rate 2000] [--finished 24]
[--ticks 10] [--profile] [--tree DIR] [--against DIR]`` starts the writers
(benchmarks/ring_load.py, one process per rank), then takes ``--ticks`` samples 1 s apart as the
monitor does: ``JobCollector.collect()`` and the process scan it shares, each timed in thread CPU
time.  The collector runs in a child process importing ``--tree`` (default: this tree; another
tree is an older commit, ``git archive``d, for a before/after).  ``--against DIR`` adds a second
child with that tree, reading the same segments on the same ticks, the two taking turns to go
first: on a machine whose load moves from one minute to the next, that pair is the comparison
to trust.  The baseline is each collector with no segment at all.  ``--profile`` prints
cProfile's top functions of collect() (to stderr, per tree).
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


def serve(tree: str, directory: str, profile: bool) -> None:
    """The child: one collector of ``tree``; each stdin line is a tick, answered on stdout with
    collect()'s and the process scan's thread-CPU ms and the live ranks it saw."""
    sys.path.insert(0, tree)
    from traintop.collectors.jobs import JobCollector
    from traintop.collectors.processes import ProcessCollector

    procs, jobs = ProcessCollector(), JobCollector(directory)
    if hasattr(jobs, "share_process_scan"):  # a tree from before the shared scan (--tree)
        jobs.share_process_scan(procs)
    jobs.collect(), procs.collect()
    prof = cProfile.Profile()
    for line in sys.stdin:
        t = time.thread_time_ns()
        procs.collect()
        t2 = time.thread_time_ns()
        if profile and line.strip() == "profile":
            prof.enable()
        snaps = jobs.collect()
        prof.disable()
        t3 = time.thread_time_ns()
        live = sum(s.state in ("live", "stalled") for s in snaps)
        print((t3 - t2) / 1e6, (t2 - t) / 1e6, live, flush=True)
    if profile:
        print(f"--- collect() of {tree}", file=sys.stderr)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(18)


class Collector:
    """A ``serve`` child and the ticks it answered."""

    def __init__(self, tree: str, directory: str, profile: bool) -> None:
        self.tree = tree
        argv = [sys.executable, __file__, "--serve", directory, "--tree", tree]
        self._proc = subprocess.Popen(argv + ["--profile"] * profile, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)  # fmt: skip

    def tick(self, command: str = "tick") -> tuple[float, float, int]:
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        job_ms, proc_ms, live = self._proc.stdout.readline().split()
        return float(job_ms), float(proc_ms), int(live)

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait()


def measure(kids: list[Collector], ticks: int, command: str = "tick") -> list[list[tuple]]:
    """``ticks`` ticks 1 s apart; each tick every collector once, taking turns to go first."""
    got: list[list[tuple]] = [[] for _ in kids]
    for tick in range(ticks):
        time.sleep(1.0)
        for i in range(len(kids))[:: 1 if tick % 2 else -1]:
            got[i].append(kids[i].tick(command))
    return got


def report(kid: Collector, base: list[tuple], run: list[tuple],
           args: argparse.Namespace) -> None:  # fmt: skip
    """Print one tree's medians, and its collect() ms per live rank."""
    base_ms = statistics.median(t[0] for t in base)
    job_ms, proc_ms = statistics.median(t[0] for t in run), statistics.median(t[1] for t in run)
    seen = run[-1][2]
    print(f"{kid.tree}")
    print(f"  no segment:  collect() {base_ms:.3f} ms, process scan "
          f"{statistics.median(t[1] for t in base):.2f} ms")  # fmt: skip
    print(f"  {seen} live ranks at {args.rate:.0f} steps/s + {args.finished} finished: "
          f"collect() {job_ms:.2f} ms median, process scan {proc_ms:.2f} ms")  # fmt: skip
    if seen:
        per = (job_ms - base_ms) / seen
        print(f"  collect() per live rank: {per:.3f} ms (target <= 0.2 ms at 2,000 steps/s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--finished", type=int, default=0)
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--tree", default=str(ROOT), help="source tree to measure (a baseline)")
    parser.add_argument("--against", help="a second tree, measured on the same ticks")
    parser.add_argument("--serve", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.tree, args.serve, args.profile)
        return 0
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    with tempfile.TemporaryDirectory(prefix="traintop-bench-") as tmp:
        ring = os.path.join(tmp, "ring")
        os.mkdir(ring, 0o700)
        trees = [args.tree] + ([args.against] if args.against else [])
        kids = [Collector(tree, ring, args.profile) for tree in trees]
        base = measure(kids, 3)
        if args.finished:
            finished_sweep(ring, args.finished)
        procs = start_jobs(ring, args.jobs, args.ranks, args.rate, args.ticks + 30)
        wait_for_segments(ring, args.finished + args.jobs * args.ranks)
        measure(kids, 2)  # each collector's first reads of every segment: not a steady tick
        runs = measure(kids, args.ticks, "profile")
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for kid in kids:
            kid.close()
    for kid, kid_base, kid_run in zip(kids, base, runs, strict=True):
        report(kid, kid_base, kid_run, args)
    if args.against:
        ratios = [a[0] / b[0] for a, b in zip(*runs, strict=True)]
        print(f"paired collect() ratio, first tree / second, median of ticks: "
              f"{statistics.median(ratios):.2f}")  # fmt: skip
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
