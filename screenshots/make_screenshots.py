"""Regenerate the SVG screenshots in screenshots/ from scripted snapshots (never by hand).

Run from the repository root:  python screenshots/make_screenshots.py
Each screenshot runs the real app headless at a fixed size, feeds it a dozen ticks of a
scripted machine so the sparklines have history, and saves what the screen shows.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.job_fixtures import data_bound_job  # noqa: E402
from tests.snapshot_fixtures import (  # noqa: E402
    EPOCH,
    ScriptedSource,
    ddp_job,
    feed,
    hung_job,
    series,
    sweep,
)
from traintop.tui.app import build_app  # noqa: E402

OUT = ROOT / "screenshots"
TICKS = 20
ATTACHED = {"gpus": 8, "cores": 32, "jobs": [data_bound_job()]}
DDP = {"gpus": 8, "cores": 32, "job_source": lambda tick: ddp_job(8, tick)}
SWEEP = {"gpus": 8, "cores": 32, "job_source": sweep}
# (file, terminal size, scripted machine, keys pressed before the shot)
SHOTS = (
    ("traintop-8gpu.svg", (200, 50), {"gpus": 8, "cores": 32}, ()),
    ("traintop-cpu-only.svg", (120, 40), {"gpus": 0, "cores": 16, "nvml": False}, ()),
    ("traintop-attach.svg", (200, 50), ATTACHED, ()),
    ("traintop-details.svg", (120, 40), ATTACHED, ("d",)),
    ("traintop-ddp.svg", (200, 50), DDP, ()),
    ("traintop-sweep.svg", (200, 50), SWEEP, ()),
)


async def shoot(
    filename: str, size: tuple[int, int], machine_args: dict, keys: tuple[str, ...], ticks=None
) -> Path:
    """Run the app at ``size`` on a scripted machine (or on ``ticks``), press ``keys`` and
    save one SVG.

    ``feed`` waits for the verdict thread after every tick, so the banner is settled too.
    """
    ticks = ticks or series(TICKS, **machine_args)
    source = ScriptedSource(ticks[:1])
    app = build_app(source, clock=lambda: EPOCH + TICKS, hostname="gpu-node-07")
    async with app.run_test(size=size) as pilot:
        await feed(pilot, source, ticks[1:])
        await pilot.press(*keys)
        await pilot.pause()
        path = OUT / filename
        path.write_text(preserve_spaces(app.export_screenshot()), encoding="utf-8")
        return path


async def shoot_fleet(filename: str = "traintop-fleet.svg", size=(160, 40)) -> Path:
    """`traintop fleet` on an 8-rank job over two nodes whose node-b overheats, from
    Prometheus answers made of real exporter output (tests/fleet_fixtures.py)."""
    from tests.fleet_fixtures import fleet, two_exporters
    from tests.test_fleet_ui import ScriptedFleet
    from traintop.tui.fleet_app import FleetApp

    app = FleetApp(ScriptedFleet(), first=fleet(two_exporters()))
    async with app.run_test(size=size) as pilot:
        await pilot.press("down")  # the cursor on node-b: its GPUs below
        await pilot.pause()
        path = OUT / filename
        path.write_text(preserve_spaces(app.export_screenshot()), encoding="utf-8")
        return path


async def shoot_replay(filename: str = "traintop-replay.svg", size=(200, 50)) -> Path:
    """`traintop replay` of a scripted night: a data-bound job for 4 minutes, then only the
    GPUs, throttling; the verdicts are the real engine's, recorded as the live monitor records
    them.  The shot jumps to the second verdict change (`n n`) and steps one sample back."""
    import tempfile

    from traintop.diagnosis.verdict_runner import VerdictRunner
    from traintop.store.reader import Recording
    from traintop.store.replay_source import ReplaySource
    from traintop.store.writer import Recorder
    from traintop.tui.replay_app import ReplayApp

    ticks = series(240, gpus=8, cores=32, jobs=[data_bound_job()]) + series(360, gpus=8)[240:]
    with tempfile.TemporaryDirectory() as tmp:
        recorder, runner = Recorder(Path(tmp) / "night.ttrec"), VerdictRunner()
        for tick in ticks:
            recorder.add_sample(tick, runner.update(tick).verdict)
        recorder.stop()
        with Recording(recorder.path) as rec:
            app = ReplayApp(ReplaySource(rec))
            async with app.run_test(size=size) as pilot:
                await pilot.press("space", "n")
                await pilot.pause(0.5)
                await pilot.press("n")
                await pilot.pause(1.0)
                await pilot.press("comma", "x", "x")
                await pilot.pause(1.0)
                path = OUT / filename
                path.write_text(preserve_spaces(app.export_screenshot()), encoding="utf-8")
                return path


def hung_box() -> list:
    """A 4-GPU box whose DDP job hung 1m12s ago: rank 2 blocks in a storage read, the others
    wait for it in all_reduce #1042, and the GPUs idle (tests/snapshot_fixtures.hung_job)."""
    from dataclasses import replace

    ticks = series(TICKS, gpus=4, cores=32, job_source=lambda tick: hung_job(53.0 + tick))
    idle = {"util_gpu_pct": 0.0, "util_mem_pct": 0.0, "power_w": 88.0, "clocks_event_reasons": 1}
    return [replace(t, gpus=tuple(replace(g, **idle) for g in t.gpus)) for t in ticks]


def preserve_spaces(svg: str) -> str:
    """Keep the leading no-break spaces of each text run: without xml:space="preserve",
    librsvg (and so most image viewers and converters) drops them and runs fields together,
    e.g. "up 3d 04:05every 1s"; browsers render the same file either way."""
    return svg.replace("<svg ", '<svg xml:space="preserve" ', 1)


def main() -> int:
    os.environ["TZ"] = "UTC"
    time.tzset()
    for filename, size, machine_args, keys in SHOTS:
        print(asyncio.run(shoot(filename, size, machine_args, keys)))
    print(asyncio.run(shoot("traintop-hang.svg", (200, 50), {}, ("j",), hung_box())))
    print(asyncio.run(shoot_fleet()))
    print(asyncio.run(shoot_replay()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
