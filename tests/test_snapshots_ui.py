"""SVG snapshot tests of the main screen: 3 terminal sizes x 0, 1 and 8 GPUs.

Deterministic by construction: scripted snapshots, a frozen clock, UTC.  After an intended
visual change, look at the new SVGs and accept them with ``pytest --snapshot-update``.
"""

from __future__ import annotations

import pytest

from tests.isolation import utc_time_zone
from tests.snapshot_fixtures import EPOCH, ScriptedSource, feed, series
from tui.app import build_app

SIZES = [(80, 24), (120, 40), (200, 50)]
GPU_COUNTS = [0, 1, 8]
TICKS = 12

_utc = pytest.fixture(autouse=True)(utc_time_zone)


@pytest.mark.parametrize("gpus", GPU_COUNTS)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen(snap_compare, size, gpus):
    ticks = series(TICKS, gpus=gpus, cores=16 if size[0] < 120 else 32)
    source = ScriptedSource(ticks[:1])
    app = build_app(source, clock=lambda: EPOCH, hostname="gpu-node-07")

    async def play(pilot) -> None:
        await feed(pilot, source, ticks[1:])

    assert snap_compare(app, terminal_size=size, run_before=play)
