"""What one diagnosis costs per tick as jobs grow: one rank, one 8-rank job, several jobs.

The engine builds a context and runs every rule per rank (a job is judged on all of its
ranks), so an 8-rank job costs more than one process; the host side (GPUs, processes, disks)
is summarised once per window.  Each case is a 21-snapshot window with 8 GPUs and ~500
processes, as the monitor holds at a 0.5 s interval; the figure is the median of ``--repeat``
timed batches in thread CPU time (other work on the box does not inflate it), and the ratio
is against the one-rank case measured in the same run.

    python benchmarks/bench_diagnose.py [--repeat 7] [--calls 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.snapshot import ProcessSnapshot, Snapshot
from diagnosis.api import diagnose
from tests.diagnosis_factories import Scene
from tests.test_diagnosis_jobs import rank, trainer

SCENE = Scene(gpu_count=8, workers=4)
OTHERS = 480  # unrelated processes on the host


def _noise() -> tuple[ProcessSnapshot, ...]:
    return tuple(
        ProcessSnapshot(9000 + i, 1, "root", "kworker", "", 0.1, 1 << 20, 0.0, 0.0)
        for i in range(OTHERS)
    )


def window(jobs: list, pids: list[int]) -> list[Snapshot]:
    procs = (*(trainer(p, 95.0) for p in pids), *_noise())
    return [replace(s, jobs=tuple(jobs), processes=procs) for s in SCENE.window(n=21, dt=0.5)]


def cases() -> dict[str, list[Snapshot]]:
    ddp = "run:tcp://10.0.0.1:29500/8"
    eight = [rank(100 + r, r, job_id=ddp, world=8) for r in range(8)]
    ended = [rank(300 + i, state="crashed", age=60.0 + i) for i in range(18)]
    three = [rank(200), rank(201), rank(202)]
    many = [
        rank(1000 + 8 * j + r, r, job_id=f"run:job{j}/8", world=8)
        for j in range(8)
        for r in range(8)
    ]
    return {
        "1 job, 1 rank": window([rank(100)], [100]),
        "1 job, 8 ranks": window(eight, [100 + r for r in range(8)]),
        "3 jobs": window(three, [200, 201, 202]),
        "1 job + 18 ended": window([rank(100), *ended], [100]),
        "8 jobs x 8 ranks": window(many, [job.pid for job in many]),
    }


def timed(snaps: list[Snapshot], calls: int) -> float:
    started = time.thread_time()
    for _ in range(calls):
        diagnose(snaps)
    return (time.thread_time() - started) / calls * 1000


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--repeat", type=int, default=7)
    args.add_argument("--calls", type=int, default=50)
    opts = args.parse_args()
    all_cases = cases()
    results = {name: [] for name in all_cases}
    for _ in range(opts.repeat):  # interleaved, so a noisy moment hits every case
        for name, snaps in all_cases.items():
            results[name].append(timed(snaps, opts.calls))
    base = statistics.median(results["1 job, 1 rank"])
    for name, times in results.items():
        mid = statistics.median(times)
        print(f"{name:<18} {mid:6.2f} ms per diagnose  ({mid / base:4.1f}x one rank)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
