"""`R` in the live monitor: start, show where, stop; a failure is one line, the monitor goes on."""

from __future__ import annotations

import asyncio
import functools
import os

from tests.snapshot_fixtures import EPOCH, ScriptedSource, feed, series
from traintop.store.reader import Recording
from traintop.tui.app import build_app
from traintop.tui.widgets.header import HeaderBar


def async_test(test):
    @functools.wraps(test)
    def run(*args, **kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def _header(app) -> str:
    return app.query_one(HeaderBar).render().plain


async def _until(pilot, condition, what: str) -> None:
    for _ in range(200):
        await pilot.pause(0.05)
        if condition():
            return
    raise AssertionError(what)


@async_test
async def test_r_records_to_a_new_file_and_the_header_says_where(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ticks = series(6, gpus=8)
    source = ScriptedSource([])
    app = build_app(source, clock=lambda: EPOCH)
    async with app.run_test(size=(200, 50)) as pilot:
        await feed(pilot, source, ticks[:2])
        await pilot.press("R")
        assert "● REC traintop-" in _header(app) and ".ttrec" in _header(app)
        await feed(pilot, source, ticks[2:])
        await pilot.press("R")
        assert "REC" not in _header(app)
        files = list(tmp_path.glob("traintop-*.ttrec"))
        assert len(files) == 1
        await _until(pilot, lambda: not list(tmp_path.glob("*-wal")), "file never closed")
    with Recording(files[0]) as rec:
        assert [rec.sample(i)[0].timestamp for i in range(len(rec.samples))] == [
            t.timestamp for t in ticks[2:]
        ]
        assert all(rec.sample(i)[1] is not None for i in range(len(rec.samples)))


@async_test
async def test_a_recording_that_cannot_start_is_one_line_and_the_monitor_goes_on(
    tmp_path, monkeypatch
):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    os.rmdir(gone)  # the working directory no longer exists: nothing can be created in it
    source = ScriptedSource([])
    app = build_app(source, clock=lambda: EPOCH)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.press("R")
        assert app.recording is None
        assert "! " in _header(app) and "cannot record there" in _header(app)
        await feed(pilot, source, series(2, gpus=8))
        assert app.snapshot is not None and app.snapshot.timestamp == EPOCH + 1


@async_test
async def test_quitting_while_recording_leaves_a_whole_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = ScriptedSource([])
    app = build_app(source, clock=lambda: EPOCH)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.press("R")
        await feed(pilot, source, series(3, gpus=8))
    (path,) = tmp_path.glob("traintop-*.ttrec")
    assert not list(tmp_path.glob("*-wal"))
    with Recording(path) as rec:
        assert len(rec.samples) == 3
