"""What making the segment at start-up costs a script's start.  Prints figures; asserts nothing.

``python benchmarks/bench_run_start.py [--runs N]``

Under `traintop run` the shim makes the run's segment as the interpreter starts
(traintop/run_start.py): it imports the probe, creates and maps the segment, starts the stack
helper thread and registers the end watch (traintop/run_end.py).  Three ways to start the same
``python -c pass``, interleaved A B C C B A so that a busy machine weighs on each alike:

* plain: no shim;
* shim: the shim on PYTHONPATH, no segment at start-up (what `traintop run` did before, and what
  a run's own children still do: one environment lookup);
* start-up segment: the shim and the segment made at start-up (the run itself).

Then the same with ``import torch`` (the start of any training script), where the segment's
cost is set against torch's own import.  Each figure is the median wall time of N starts (and
the spread between the 10th and the 90th percentile), and its median CPU time.  Then, inside
one process, the segment's creation alone (``run_start.begin``), timed by the process itself.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHIM = REPO / "traintop" / "shim"
BEGIN = (
    "import time, os, sys\n"
    "t = time.perf_counter_ns()\n"
    "from traintop import attach, run_start\n"
    "run_start.begin(attach)\n"
    "print((time.perf_counter_ns() - t) / 1e6)\n"
)


def env_for(kind: str, ring: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINTOP")}
    env["TRAINTOP_RING_DIR"] = ring
    env["PYTHONPATH"] = str(REPO) if kind == "plain" else f"{SHIM}{os.pathsep}{REPO}"
    if kind == "start-up segment":
        env["TRAINTOP_STARTUP_PID"] = str(os.getpid())  # the child's parent: it is a run
    return env


def one(code: str, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one start: the CPU time (user + system, from the
    kernel's account of the reaped child) moves less than the wall time on a busy machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def figures(code: str, runs: int, ring: str) -> dict[str, list[tuple[float, float]]]:
    kinds = ("plain", "shim", "start-up segment")
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    envs = {k: env_for(k, ring) for k in kinds}
    for i in range(runs):
        for kind in kinds if i % 2 == 0 else reversed(kinds):
            times[kind].append(one(code, envs[kind]))
    return times


def line(name: str, values: list[tuple[float, float]], base: tuple[float, float]) -> str:
    wall = statistics.median(v[0] for v in values)
    cpu = statistics.median(v[1] for v in values)
    spread = sorted(v[0] for v in values)
    p10, p90 = spread[len(spread) // 10], spread[(len(spread) * 9) // 10]
    text = (f"  {name:<17} wall {1000 * wall:7.1f} ms (p10 {1000 * p10:.0f}, p90 "
            f"{1000 * p90:.0f})  CPU {1000 * cpu:7.1f} ms")  # fmt: skip
    if name != "plain":
        extra = (1000 * (wall - base[0]), 1000 * (cpu - base[1]))
        text += f"   vs plain: wall {extra[0]:+.1f} ms, CPU {extra[1]:+.1f} ms"
    return text


def begin_alone(runs: int, ring: str) -> list[float]:
    """``run_start.begin`` timed inside a process that the shim did not start as a run."""
    env = env_for("plain", ring)
    env["TRAINTOP_STARTUP_PID"] = str(os.getpid())
    out = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", BEGIN], env=env, check=True,
                              capture_output=True, text=True)  # fmt: skip
        out.append(float(done.stdout.strip()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ring = os.path.join(tmp, "ring")
        os.mkdir(ring, 0o700)
        for title, code in (("python -c pass", "pass"), ("python -c 'import torch'",
                                                          "import torch")):  # fmt: skip
            times = figures(code, args.runs, ring)
            plain = times["plain"]
            base = (statistics.median(v[0] for v in plain), statistics.median(v[1] for v in plain))
            print(f"{title}, {args.runs} starts each:")
            for name, values in times.items():
                print(line(name, values, base))
        alone = sorted(begin_alone(args.runs, ring))
        print(f"run_start.begin() inside the process: median {statistics.median(alone):.1f} ms "
              f"(p90 {alone[(len(alone) * 9) // 10]:.1f} ms)")  # fmt: skip
        print(
            f"segments left behind (runs that never stepped are removed): {len(os.listdir(ring))}"
        )


if __name__ == "__main__":
    main()
