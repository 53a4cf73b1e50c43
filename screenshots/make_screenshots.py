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

from tests.snapshot_fixtures import EPOCH, ScriptedSource, feed, series  # noqa: E402
from tui.app import build_app  # noqa: E402

OUT = ROOT / "screenshots"
TICKS = 20
SHOTS = (
    ("traintop-8gpu.svg", (200, 50), {"gpus": 8, "cores": 32}),
    ("traintop-cpu-only.svg", (120, 40), {"gpus": 0, "cores": 16, "nvml": False}),
)


async def shoot(filename: str, size: tuple[int, int], machine_args: dict) -> Path:
    """Run the app at ``size`` on a scripted machine and save one SVG."""
    ticks = series(TICKS, **machine_args)
    source = ScriptedSource(ticks[:1])
    app = build_app(source, clock=lambda: EPOCH + TICKS, hostname="gpu-node-07")
    async with app.run_test(size=size) as pilot:
        await feed(pilot, source, ticks[1:])
        await pilot.pause()
        return Path(app.save_screenshot(filename, path=str(OUT)))


def main() -> int:
    os.environ["TZ"] = "UTC"
    time.tzset()
    for filename, size, machine_args in SHOTS:
        print(asyncio.run(shoot(filename, size, machine_args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
