"""Replay in the monitor's UI (Pilot): playback keys, the timeline, the verdict of the moment."""

from __future__ import annotations

import asyncio
import functools

import pytest

from tests.snapshot_fixtures import EPOCH, series
from tests.store_helpers import record, verdict
from traintop.store.reader import Recording
from traintop.store.replay_source import ReplaySource
from traintop.tui.replay_app import ReplayApp
from traintop.tui.screens.details import DetailsScreen
from traintop.tui.widgets.gpu import GpuPanel
from traintop.tui.widgets.header import HeaderBar
from traintop.tui.widgets.verdict import VerdictBanner

N = 200
CHANGE_AT = 120  # the verdict turns from compute to data_cpu here


def async_test(test):
    @functools.wraps(test)
    def run(*args, **kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


@pytest.fixture
def recording(tmp_path):
    """Two hundred samples; the apps below open it paused at the first, so what a test reads
    does not depend on how long the app took to start."""
    snaps = series(N, gpus=8)
    verdicts = [verdict("compute" if i < CHANGE_AT else "data_cpu") for i in range(N)]
    path = record(tmp_path / "night.ttrec", snaps, verdicts)
    with Recording(path) as rec:
        yield rec


async def _settle(pilot, app, index: int) -> None:
    """Wait until the sample at ``index`` is on screen (decoding runs on the source thread)."""
    for _ in range(100):
        await pilot.pause(0.02)
        shown = app.snapshot
        if app.replay.position().index == index and shown and shown.timestamp == EPOCH + index:
            return
    raise AssertionError(f"sample {index} never shown; at {app.replay.position()}")


def _timeline(app) -> str:
    return app.query_one("#timeline").render().plain


def _banner(app) -> str:
    return app.query_one(VerdictBanner).render().plain


@async_test
async def test_playback_keys_move_through_the_recording(recording):
    app = ReplayApp(ReplaySource(recording, playing=False))
    async with app.run_test(size=(200, 50)) as pilot:
        await _settle(pilot, app, 0)
        assert "⏸" in _timeline(app)
        await pilot.press("full_stop", "full_stop")
        await _settle(pilot, app, 2)
        await pilot.press("comma")
        await _settle(pilot, app, 1)
        await pilot.press("right_square_bracket")
        await _settle(pilot, app, 61)
        await pilot.press("left_square_bracket")
        await _settle(pilot, app, 1)
        assert "2/200" in _timeline(app) and "+00:00:01/00:03:19" in _timeline(app)


@async_test
async def test_speed_cycles_through_x1_x10_x60_and_plays_that_fast(recording):
    app = ReplayApp(ReplaySource(recording, playing=False))
    async with app.run_test(size=(200, 50)) as pilot:
        await _settle(pilot, app, 0)
        await pilot.press("space", "x")  # play, faster
        assert "×10" in _timeline(app)
        await pilot.press("x")
        assert "×60" in _timeline(app)
        await pilot.pause(1.0)  # 60 recorded seconds per second
        assert app.replay.position().index >= 30
        await pilot.press("x")
        assert "×1 " in _timeline(app)


@async_test
async def test_the_banner_and_details_are_those_of_that_moment(recording):
    """Jump straight to the verdict change: the banner shows the recorded verdict at once,
    and the details' history holds the samples before the jump."""
    app = ReplayApp(ReplaySource(recording, playing=False))
    async with app.run_test(size=(200, 50)) as pilot:
        await _settle(pilot, app, 0)
        await pilot.press("n")
        await _settle(pilot, app, CHANGE_AT)
        assert "data_cpu holds" in _banner(app)
        await pilot.press("comma")
        await _settle(pilot, app, CHANGE_AT - 1)
        assert "compute holds" in _banner(app)
        await pilot.press("d")
        await pilot.pause(0.1)
        assert isinstance(app.screen, DetailsScreen)
        assert len(app.verdicts.shown.history) == CHANGE_AT


@async_test
async def test_goto_a_clock_time_and_an_offset(recording, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    import time

    time.tzset()
    app = ReplayApp(ReplaySource(recording, playing=False))
    try:
        async with app.run_test(size=(200, 50)) as pilot:
            await _settle(pilot, app, 0)
            await pilot.press("g", *"15:08:00", "enter")
            await _settle(pilot, app, 80)  # 15:06:40 + 80 s
            header = app.query_one(HeaderBar).render().plain
            assert "15:08:00" in header  # the header clock is the recording's
            await pilot.press("g", "plus", *"10s", "enter")
            await _settle(pilot, app, 10)
    finally:
        monkeypatch.undo()
        time.tzset()


@async_test
async def test_panels_show_the_recorded_numbers_and_history(recording):
    app = ReplayApp(ReplaySource(recording, playing=False))
    live = series(N, gpus=8)
    async with app.run_test(size=(200, 50)) as pilot:
        await _settle(pilot, app, 0)
        await pilot.press("g", *"+150s", "enter")
        await _settle(pilot, app, 150)
        gpu_text = app.query_one(GpuPanel).render().plain
        util = f"{live[150].gpus[0].util_gpu_pct:.0f}%"
        assert util in gpu_text
        assert len(app.query_one(GpuPanel)._history[0]) >= 120  # sparklines primed on the jump


@async_test
async def test_live_only_keys_are_gone_in_replay(recording):
    app = ReplayApp(ReplaySource(recording, playing=False))
    async with app.run_test(size=(200, 50)) as pilot:
        await _settle(pilot, app, 0)
        keys = set(app._bindings.key_to_bindings)
        assert {"space", "comma", "full_stop", "x", "g", "1", "8"} <= keys
        assert not {"R", "plus", "minus"} & keys
        await pilot.press("R")
        assert app.recording is None


@async_test
async def test_help_lists_the_playback_keys(recording):
    from traintop.tui.screens.help import HelpScreen

    app = ReplayApp(ReplaySource(recording, playing=False))
    async with app.run_test(size=(200, 50)) as pilot:
        await _settle(pilot, app, 0)
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        assert isinstance(app.screen, HelpScreen)
        text = " ".join(str(s.render()) for s in app.screen.query("Static"))
        for key in ("Play/pause", "Back", "Fwd", "-1m", "+1m", "Speed", "Go to",
                    "Next verdict change", "Toggle GPU"):  # fmt: skip
            assert key in text, key
