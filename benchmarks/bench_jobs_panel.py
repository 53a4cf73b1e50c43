"""What the jobs table costs the UI thread per tick, against the GPU panel in the same run.

The real app runs headless at 200x50 on scripted snapshots (8 GPUs; one job of 1, 8 or 64
ranks, or a sweep of 24 runs).  For each state it times, over many ticks, the Training and
DataLoader panels taking a snapshot (grouping, rows on screen, line diff) with the job numbers
changing every tick and with them unchanged, and the 8-GPU panel taking the same snapshots as
the baseline.  Painting is Textual's and is measured by bench_monitor.py.

    python benchmarks/bench_jobs_panel.py [--ticks 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.snapshot_fixtures import EPOCH, ScriptedSource, ddp_job, machine, sweep
from traintop.collectors.snapshot import Snapshot
from traintop.tui.app import build_app
from traintop.tui.widgets.dataloader import DataLoaderPanel
from traintop.tui.widgets.gpu import GpuPanel
from traintop.tui.widgets.training import TrainingPanel

STATES: dict[str, Callable[[int], Sequence]] = {
    "1 rank": lambda tick: ddp_job(1, tick),
    "8 ranks": lambda tick: ddp_job(8, tick),
    "64 ranks": lambda tick: ddp_job(64, tick),
    "sweep of 24": sweep,
}


def snapshots(jobs: Callable[[int], Sequence], ticks: int, changing: bool) -> list[Snapshot]:
    return [machine(8, tick=t, jobs=jobs(t if changing else 0)) for t in range(ticks)]


def per_tick_ms(work: Callable[[Snapshot], None], snaps: Sequence[Snapshot]) -> float:
    """Median of five passes over ``snaps``, in milliseconds per snapshot."""
    passes = []
    for _ in range(5):
        start = time.perf_counter()
        for snap in snaps:
            work(snap)
        passes.append((time.perf_counter() - start) / len(snaps) * 1e3)
    return statistics.median(passes)


async def measure(ticks: int) -> None:
    source = ScriptedSource([])
    app = build_app(source, clock=lambda: EPOCH, hostname="bench")
    async with app.run_test(size=(200, 50)) as pilot:
        training, loader = app.query_one(TrainingPanel), app.query_one(DataLoaderPanel)
        gpu = app.query_one(GpuPanel)

        def jobs_panels(snap: Snapshot) -> None:
            training.update_jobs(snap)
            loader.show_group(training.focused, snap.processes, training.selected_rank)

        print(f"{'state':<12} {'changing':>9} {'unchanged':>10} {'GPU panel':>10} {'ratio':>6}")
        for name, jobs in STATES.items():
            source.push(machine(8, jobs=jobs(0)))
            await pilot.pause()
            changing = per_tick_ms(jobs_panels, snapshots(jobs, ticks, True))
            same = per_tick_ms(jobs_panels, snapshots(jobs, ticks, False))
            base = per_tick_ms(gpu.show, snapshots(jobs, ticks, True))
            print(f"{name:<12} {changing:>7.3f}ms {same:>8.3f}ms {base:>8.3f}ms "
                  f"{changing / base:>5.2f}x")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=300)
    asyncio.run(measure(parser.parse_args().ticks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
