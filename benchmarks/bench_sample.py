"""What each host collector costs the sampler thread per tick, against a baseline tree.

``python benchmarks/bench_sample.py [--tree DIR] [--ticks 30] [--gap 1.0] [--spawn 0] [--jobs 0]``

One worker process per source tree (this one and, with ``--tree``, another: an older commit
unpacked with ``git archive HEAD | tar -x -C DIR``) builds the collectors as the monitor does
(8 fake H100s from the C-ABI fake NVML, no training job) and wraps each in a timer.  The parent
asks the workers for one ``Sampler.sample_once()`` in turn, ``--gap`` seconds apart as the
monitor ticks (cold caches matter: back to back a tick costs about half), and prints each
collector's median thread CPU time in µs, and this tree's figure as a ratio of the baseline's.
Ticks alternate between the trees, so a noisy minute on a shared machine hits both alike.
``--spawn N`` adds N sleeping processes first: GPU boxes run 300 to 1000, this VM about 70.
``--jobs N`` starts N training jobs of 8 ranks at 20 steps/s (benchmarks/ring_load.py, as
bench_monitor.py's "one 8-rank job" state): their processes run every tick.  No job collector
runs: what is measured is the host part of the sample, processes included, and (``ranks``)
what the job collector reads of each live rank's host side each tick (issue 43: its memory
cgroup, its cgroup v2 PSI, the OOM witness's counters, its TCP send queues as read while it
waits on its peers), for every rank of ``--jobs`` (or, with no job, for ``--ranks`` sleepers).
A collector a baseline tree does not have reads "-".
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

COLLECTORS = ("gpu", "processes", "cpu", "memory", "disks", "nics", "host", "pressure")

WORKER = """
import dataclasses, json, sys, time
from traintop.collectors.factory import build_collectors
from traintop.collectors.sampler import Sampler

class Timed:
    def __init__(self, name, inner, spent):
        self.name, self.inner, self.spent = name, inner, spent
    def collect(self, *args):
        started = time.thread_time_ns()
        try:
            return self.inner.collect(*args)
        finally:
            self.spent[self.name] = (time.thread_time_ns() - started) / 1e3
    def close(self):
        self.inner.close()
    def __getattr__(self, name):  # what the sampler reads besides collect (processes' total)
        return getattr(self.inner, name)

spent = {}
c = build_collectors()
timed = {n: Timed(n, getattr(c, n), spent) for n in NAMES if getattr(c, n, None) is not None}
sampler = Sampler(dataclasses.replace(c, **timed))
sampler.sample_once()
try:  # the job collector's reads of each live rank's host side (absent from older trees)
    from traintop.collectors.cgroup import CgroupReader
    from traintop.collectors.job_memory import JobMemoryReader
    from traintop.collectors.job_sockets import SocketQueues
    reads = (JobMemoryReader(CgroupReader()), SocketQueues())
except ImportError:
    reads = None
pids = [int(p) for p in RANK_PIDS]

def rank_reads():
    memory, sockets = reads
    for pid in pids:
        memory.read(pid, ())
        memory.pressure(pid)
        sockets.read(pid)

for line in sys.stdin:
    started = time.thread_time_ns()
    sampler.sample_once()
    spent["sample"] = (time.thread_time_ns() - started) / 1e3
    if reads is not None and pids:
        started = time.thread_time_ns()
        rank_reads()
        spent["ranks"] = (time.thread_time_ns() - started) / 1e3
    print(json.dumps(spent), flush=True)
"""


def start_worker(tree: Path, env: dict[str, str], ranks: list[int]) -> subprocess.Popen:
    """A process that samples once per line it reads and answers with its timings as JSON."""
    code = WORKER.replace("NAMES", repr(COLLECTORS)).replace("RANK_PIDS", repr(ranks))
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=tree,
        env={**env, "PYTHONPATH": str(tree)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def tick(worker: subprocess.Popen) -> dict[str, float]:
    assert worker.stdin is not None and worker.stdout is not None
    worker.stdin.write("\n")
    worker.stdin.flush()
    return json.loads(worker.stdout.readline())


def run(trees: dict[str, Path], ticks: int, gap_s: float,
        ranks: list[int]) -> dict[str, dict[str, float | None]]:  # fmt: skip
    """Median µs per collector and per whole sample, for each tree, ticks interleaved."""
    from bench_monitor import fake_nvml_env

    env = {**os.environ, **fake_nvml_env()}
    workers = {name: start_worker(tree, env, ranks) for name, tree in trees.items()}
    seen: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    try:
        for _ in range(ticks):
            for name, worker in workers.items():
                time.sleep(gap_s / len(workers))
                seen[name].append(tick(worker))
    finally:
        for worker in workers.values():
            worker.kill()
            worker.wait()
    keys = (*COLLECTORS, "sample", "ranks")
    return {n: {k: _median([t[k] for t in seen[n] if k in t]) for k in keys} for n in trees}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def report(medians: dict[str, dict[str, float | None]]) -> None:
    names = list(medians)
    print(
        f"{'collector':<10}" + "".join(f"{n:>12}" for n in names) + ("  ratio" * (len(names) > 1))
    )
    for key in (*COLLECTORS, "sample", "ranks"):
        got = [medians[n][key] for n in names]
        cells = "".join(f"{v:>10.0f}µs" if v is not None else f"{'-':>12}" for v in got)
        both = len(got) > 1 and got[0] is not None and got[1]
        ratio = f"  {got[0] / got[1]:.2f}" if both else ""  # type: ignore[operator]
        print(f"{key:<10}{cells}{ratio}")


def spawn_sleepers(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen(["sleep", "3600"]) for _ in range(count)]


def start_training(jobs: int, ring: str, seconds: float) -> list[subprocess.Popen]:
    """``jobs`` launchers of 8 ring-writing ranks each, once their segments exist."""
    from bench_collect import start_jobs, wait_for_segments

    launchers = start_jobs(ring, jobs, 8, 20.0, seconds)
    wait_for_segments(ring, 8 * jobs)
    return launchers


def _ranks(ring: str) -> list[int]:
    """The pids of the ranks writing segments in ``ring`` (``<pid>-r<rank>-...ring``)."""
    return sorted(int(name.split("-")[0]) for name in os.listdir(ring) if name.endswith(".ring"))


def stop(procs: list[subprocess.Popen], group: bool = False) -> None:
    for proc in procs:
        if group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.kill()
        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=None, help="baseline source tree")
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between a tree's ticks")
    parser.add_argument("--spawn", type=int, default=0, help="extra sleeping processes")
    parser.add_argument("--jobs", type=int, default=0, help="8-rank training jobs to run")
    parser.add_argument("--ranks", type=int, default=8, help="ranks read with no job: sleepers")
    opts = parser.parse_args()
    trees = {"this": ROOT} | ({"baseline": opts.tree.resolve()} if opts.tree else {})
    sleepers = spawn_sleepers(opts.spawn)
    with tempfile.TemporaryDirectory(prefix="bench-sample-ring-") as ring:
        seconds = 2 * opts.ticks * opts.gap + 60
        launchers = start_training(opts.jobs, ring, seconds) if opts.jobs else []
        ranks = _ranks(ring) if opts.jobs else [p.pid for p in sleepers[: opts.ranks]]
        extra = [] if opts.jobs or len(ranks) >= opts.ranks else spawn_sleepers(opts.ranks)
        ranks += [p.pid for p in extra][: opts.ranks - len(ranks)]
        try:
            print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
            medians = run(trees, opts.ticks, opts.gap, ranks)
            processes = sum(name.isdigit() for name in os.listdir("/proc"))
            print(f"{processes} processes, {opts.jobs} jobs, {len(ranks)} ranks read, medians "
                  f"of {opts.ticks} ticks {opts.gap} s apart, thread CPU time")  # fmt: skip
            report(medians)
            print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        finally:
            stop(sleepers + extra)
            stop(launchers, group=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
