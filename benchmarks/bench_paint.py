"""What one tick costs the UI thread, and what it sends to the terminal, in the monitor's states.

The real app runs headless at 200x50 on scripted snapshots (tests/snapshot_fixtures.py: 8 H100s,
a busy host) in four states: no job, one 8-rank job, 8 jobs x 8 ranks, 24 finished sweep runs.
Per tick it measures the main thread's CPU time (``time.thread_time``, so other processes on
the machine do not count) for the two things the UI thread does with a snapshot: taking it
(``on_snapshot_ready``: panels, header, verdict banner) and painting it (the screen's update:
layout if needed, compositor, terminal data).  The paint goes through the terminal driver's
own pipeline (tui/chops.py, the driver's ``write``), with the terminal replaced by a byte
counter, so bytes per tick are what a pty would get.  Verdicts are judged outside the timing
(the sampler thread's work).

    python benchmarks/bench_paint.py [--ticks 60] [--repeat 3] [--tree DIR] [--states ...]
        [--profile STATE]

``--tree DIR`` measures another source tree (``git archive HEAD | tar -x -C DIR``) in the same
run, interleaved with this one, and prints both side by side.  ``--profile STATE`` prints a
cProfile of the main thread's tick work in that state instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATES = ("no job", "one 8-rank job", "8 jobs x 8 ranks", "24 finished")
WARMUP = 8  # ticks before the timing: sparklines fill, the verdict settles, caches warm


def state_jobs(state: str, tick: int) -> tuple:
    """The jobs of ``state`` at ``tick`` (numbers move every tick, as sampled ones do)."""
    from tests.snapshot_fixtures import ddp_job

    if state == "no job":
        return ()
    if state == "one 8-rank job":
        return ddp_job(8, tick)
    if state == "8 jobs x 8 ranks":
        return tuple(_rank(j, rank, tick) for j in range(8) for rank in range(8))
    # As bench_monitor.py has them: all ended just before the monitor started, so their rows
    # fold into the ended-jobs row (all but the one under the cursor) during the measurement;
    # of an ended run only the age of its last step moves.
    return tuple(replace(run, last_step_age_s=10.0 + tick) for run in _finished_sweep())


@cache
def _finished_sweep() -> tuple:
    from tests.snapshot_fixtures import sweep_run

    return tuple(sweep_run(i, state="finished") for i in range(24))


def _rank(job: int, rank: int, tick: int):
    """Rank ``rank`` of the ``job``-th of eight 8-rank jobs."""
    from tests.snapshot_fixtures import ddp_rank

    job_id = f"run:tcp://10.0.0.{job}:29500/8"
    return ddp_rank(rank, 8, tick, name=f"job{job}", pid=5000 + 100 * job + rank, job_id=job_id)


class Meter:
    """Thread CPU time of wrapped calls, and the bytes the driver would write."""

    def __init__(self) -> None:
        self.update_s = self.paint_s = 0.0
        self.bytes = 0

    def wrap(self, owner: type, name: str, field: str) -> None:
        original = getattr(owner, name)
        meter = self

        def timed(*args, **kwargs):
            start = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                setattr(meter, field, getattr(meter, field) + time.thread_time() - start)

        setattr(owner, name, timed)


def terminal_writer(meter: Meter) -> Callable[[str], None]:
    """The tree's driver ``write`` (colour compaction and all), its terminal a byte counter."""
    from textual.drivers.linux_driver import LinuxDriver

    from traintop.tui import chops
    from traintop.tui.driver import QuietLinuxDriver

    def count(self, data: str) -> None:
        meter.bytes += len(data.encode())

    LinuxDriver.write = count
    chops.install()
    driver = QuietLinuxDriver.__new__(QuietLinuxDriver)
    driver._hold_lock, driver._held = threading.Lock(), None  # not holding start-up paints
    return driver.write


def display_through(app, write: Callable[[str], None]) -> None:
    """Make the headless app render its updates as the terminal driver would get them."""
    from rich.control import Control
    from textual._compositor import CompositorUpdate

    def display(screen, renderable) -> None:
        if renderable is None or app._batch_count:
            return
        if isinstance(renderable, CompositorUpdate):
            data = renderable.render_segments(app.console)
            data += Control.move_to(*app.cursor_position).segment.text
        else:
            data = app.console._render_buffer(app.console.render(renderable))
        write(data)

    app._display = display


async def measure_state(state: str, ticks: int, profile: bool) -> dict:
    """Per-tick medians of one state, on a fresh app."""
    import cProfile
    import pstats

    from textual.screen import Screen

    from tests.snapshot_fixtures import EPOCH, ScriptedSource, machine
    from traintop.tui.app import TraintopApp, build_app

    meter, now = Meter(), [EPOCH]
    meter.wrap(TraintopApp, "on_snapshot_ready", "update_s")
    meter.wrap(Screen, "_on_timer_update", "paint_s")
    source = ScriptedSource([])
    app = build_app(source, clock=lambda: now[0], hostname="gpu-node-07")
    write = terminal_writer(meter)
    rows, profiler = [], cProfile.Profile()
    async with app.run_test(size=(200, 50)) as pilot:
        display_through(app, write)
        for tick in range(WARMUP + ticks):
            now[0] = EPOCH + tick
            snapshot = machine(8, tick=tick, jobs=state_jobs(state, tick))
            meter.update_s = meter.paint_s = meter.bytes = 0
            if profile and tick >= WARMUP:
                profiler.enable()
            source.push(snapshot)
            await pilot.pause()
            profiler.disable()
            rows.append((meter.update_s * 1e3, meter.paint_s * 1e3, meter.bytes))
    if profile:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    steady = rows[WARMUP:]
    return {
        "update_ms": statistics.median(r[0] for r in steady),
        "paint_ms": statistics.median(r[1] for r in steady),
        "bytes": statistics.mean(r[2] for r in steady),
    }


def run_tree(tree: Path, states: list[str], ticks: int) -> dict[str, dict]:
    """One pass over ``states`` with ``tree``'s code, in a fresh interpreter."""
    argv = [sys.executable, __file__, "--child", str(tree), "--ticks", str(ticks),
            "--states", ",".join(states)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(argv, env=env, cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def child(tree: Path, states: list[str], ticks: int) -> None:
    sys.path.insert(0, str(tree))
    results = {state: asyncio.run(measure_state(state, ticks, False)) for state in states}
    print(json.dumps(results))


def report(runs: dict[str, list[dict[str, dict]]], states: list[str]) -> None:
    print(f"{'state':<18} {'tree':<6} {'update ms':>9} {'paint ms':>9} {'total ms':>9} "
          f"{'bytes/tick':>10}")  # fmt: skip
    for state in states:
        for name, passes in runs.items():
            update = statistics.median(p[state]["update_ms"] for p in passes)
            paint = statistics.median(p[state]["paint_ms"] for p in passes)
            sent = statistics.median(p[state]["bytes"] for p in passes)
            print(f"{state:<18} {name:<6} {update:>9.2f} {paint:>9.2f} {update + paint:>9.2f} "
                  f"{sent:>10.0f}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--states", default=",".join(STATES))
    parser.add_argument("--tree", type=Path, default=None, help="also measure this source tree")
    parser.add_argument("--profile", default=None, help="cProfile the tick work of one state")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    states = [s.strip() for s in args.states.split(",") if s.strip()]
    if args.child is not None:
        child(args.child, states, args.ticks)
        return 0
    if args.profile:
        sys.path.insert(0, str(ROOT))
        asyncio.run(measure_state(args.profile, args.ticks, True))
        return 0
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    trees = {"this": ROOT, **({"other": args.tree.resolve()} if args.tree else {})}
    runs: dict[str, list[dict[str, dict]]] = {name: [] for name in trees}
    for _ in range(args.repeat):  # interleaved, so a busy minute hits both trees alike
        for name, tree in trees.items():
            runs[name].append(run_tree(tree, states, args.ticks))
    report(runs, states)
    print(f"{args.ticks} ticks x {args.repeat} passes, medians; terminal 200x50")
    print("load average after:  {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
