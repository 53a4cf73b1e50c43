"""SVG snapshots of the verdict: the main screen with a data-loading verdict, and its details.

Scripted snapshots (8 H100s, one attached data-bound job), a frozen clock, UTC, and a wait for
the verdict thread after every tick, so each run draws the same frame.  After an intended visual
change, look at the new SVGs and accept them with ``pytest --snapshot-update``.
"""

from __future__ import annotations

import pytest

from tests.isolation import utc_time_zone
from tests.job_fixtures import data_bound_job
from tests.snapshot_fixtures import EPOCH, ScriptedSource, series
from tests.test_tui_verdict import settle
from traintop.tui.app import build_app

TICKS = 12

_utc = pytest.fixture(autouse=True)(utc_time_zone)


def _app_and_play(keys: tuple[str, ...] = ()):
    ticks = series(TICKS, gpus=8, jobs=[data_bound_job()])
    source = ScriptedSource(ticks[:1])
    app = build_app(source, clock=lambda: EPOCH, hostname="gpu-node-07")

    async def play(pilot) -> None:
        await settle(pilot, source, ticks)
        await pilot.press(*keys)

    return app, play


def test_main_screen_with_verdict(snap_compare):
    app, play = _app_and_play()
    assert snap_compare(app, terminal_size=(120, 40), run_before=play)


def test_details_screen(snap_compare):
    app, play = _app_and_play(("d",))
    assert snap_compare(app, terminal_size=(120, 40), run_before=play)
