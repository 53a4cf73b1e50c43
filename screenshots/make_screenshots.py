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
from tests.snapshot_fixtures import EPOCH, ScriptedSource, feed, series  # noqa: E402
from tui.app import build_app  # noqa: E402

OUT = ROOT / "screenshots"
TICKS = 20
ATTACHED = {"gpus": 8, "cores": 32, "jobs": [data_bound_job()]}
# (file, terminal size, scripted machine, keys pressed before the shot)
SHOTS = (
    ("traintop-8gpu.svg", (200, 50), {"gpus": 8, "cores": 32}, ()),
    ("traintop-cpu-only.svg", (120, 40), {"gpus": 0, "cores": 16, "nvml": False}, ()),
    ("traintop-attach.svg", (200, 50), ATTACHED, ()),
    ("traintop-details.svg", (120, 40), ATTACHED, ("d",)),
)


async def shoot(
    filename: str, size: tuple[int, int], machine_args: dict, keys: tuple[str, ...]
) -> Path:
    """Run the app at ``size`` on a scripted machine, press ``keys`` and save one SVG.

    ``feed`` waits for the verdict thread after every tick, so the banner is settled too.
    """
    ticks = series(TICKS, **machine_args)
    source = ScriptedSource(ticks[:1])
    app = build_app(source, clock=lambda: EPOCH + TICKS, hostname="gpu-node-07")
    async with app.run_test(size=size) as pilot:
        await feed(pilot, source, ticks[1:])
        await pilot.press(*keys)
        await pilot.pause()
        path = OUT / filename
        path.write_text(preserve_spaces(app.export_screenshot()), encoding="utf-8")
        return path


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
