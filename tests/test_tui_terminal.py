"""What the monitor writes to its terminal, replayed on a minimal terminal (tests/test_sgr.py).

The terminal driver renders screen updates itself (tui/chops.py): only the lines an update
sends, only their changed cells, colours as differences.  Over many ticks of a busy machine,
the screen those writes leave must be the screen a full repaint draws, cell for cell and
style for style; and a tick that changes nothing on screen must write nothing.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from textual._compositor import ChopsUpdate, Compositor, LayoutUpdate
from textual._styles_cache import StylesCache
from textual.strip import Strip

from tests.snapshot_fixtures import EPOCH, ScriptedSource, ddp_job, machine, sweep
from tests.test_sgr import Cells, replay
from traintop.tui import chops
from traintop.tui.app import TraintopApp, build_app
from traintop.tui.widgets.cpu import CpuPanel
from traintop.tui.widgets.disk import DiskPanel
from traintop.tui.widgets.framed_rows import FramedRows
from traintop.tui.widgets.gpu import GpuPanel
from traintop.tui.widgets.panel import LineWidget


@pytest.fixture(autouse=True)
def terminal_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's renders, for this test only (the driver installs them for good)."""
    monkeypatch.setattr(ChopsUpdate, "render_segments", chops.render_segments)
    monkeypatch.setattr(LayoutUpdate, "render_segments", chops.render_layout)
    monkeypatch.setattr(Compositor, "render_partial_update", chops.render_partial_update)


def _writes(app: TraintopApp) -> list[str]:
    """Record what each screen update would write to the terminal from now on."""
    written: list[str] = []
    display = app._display

    def spy(screen, renderable) -> None:
        if renderable is not None and not app._batch_count:
            written.append(renderable.render_segments(app.console))
        display(screen, renderable)

    app._display = spy
    return written


def _full_repaint(app: TraintopApp) -> Cells:
    return replay(app.screen._compositor.render_update(full=True).render_segments(app.console))


def _jobs_at(tick: int) -> tuple:
    """Jobs that come, change and end: a layout change now and then, as in real use."""
    if tick < 4:
        return ddp_job(8, tick)
    if tick < 8:
        return (*ddp_job(8, tick), *sweep(tick))
    return sweep(tick)


def test_partial_updates_leave_the_screen_a_full_repaint_draws():
    asyncio.run(_partial_updates_match())


async def _ticks(count: int) -> AsyncIterator[tuple[int, TraintopApp]]:
    """Each tick of ``count`` (jobs that come, change and end) and the app at 200x50 after it."""
    now = [EPOCH]
    source = ScriptedSource([])
    app = build_app(source, clock=lambda: now[0], hostname="gpu-node-07")
    async with app.run_test(size=(200, 50)) as pilot:
        for tick in range(count):
            now[0] = EPOCH + tick
            source.push(machine(8, tick=tick, jobs=_jobs_at(tick)))
            await pilot.pause()
            yield tick, app


async def _partial_updates_match() -> None:
    ticks = _ticks(12)
    _, app = await anext(ticks)
    screen = _full_repaint(app)
    written = _writes(app)
    async for tick, app in ticks:
        for data in written:
            screen = replay(data, screen)
        written.clear()
        assert screen == _full_repaint(app), f"tick {tick}"


def test_a_tick_that_changes_nothing_writes_nothing():
    asyncio.run(_unchanged_tick())


async def _unchanged_tick() -> None:
    source = ScriptedSource([])
    app = build_app(source, clock=lambda: EPOCH, hostname="gpu-node-07")
    snapshot = machine(8, jobs=ddp_job(8))
    async with app.run_test(size=(200, 50)) as pilot:
        for _ in range(60):  # the history sparklines fill with one value
            source.push(replace(snapshot))  # equal, not the same object (that shows nothing)
            await pilot.pause()
        written = _writes(app)
        source.push(replace(snapshot))
        await pilot.pause()
        assert "".join(written) == ""
        hotter = replace(snapshot.gpus[4], temp_c=snapshot.gpus[4].temp_c + 1)
        gpus = (*snapshot.gpus[:4], hotter, *snapshot.gpus[5:])
        source.push(replace(snapshot, gpus=gpus))
        await pilot.pause()
        cells = replay("".join(written))
        assert len({y for y, _ in cells}) == 1  # one GPU's row, and of it a few cells
        assert 0 < len(cells) <= 3


def test_ticks_leave_no_strips_to_the_cycle_collector():
    """Rows are dropped by reference counting as they are replaced: a strip caught in a
    reference cycle waits for the cyclic collector, and a tick changes dozens of rows."""
    garbage = asyncio.run(_cyclic_garbage_of_ticks())
    assert [o for o in garbage if isinstance(o, Strip)] == []


async def _cyclic_garbage_of_ticks() -> list:
    ticks = _ticks(4)
    await anext(ticks)  # start-up and the first layout are not what a tick leaves
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        async for _ in ticks:
            pass
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_panels_draw_what_textual_draws_in_every_theme_and_style():
    """Panels convert their run styles as Textual's ANSI-to-truecolor filter does, once per
    style, and frame a changed row from a cached frame (tui/widgets/panel.py); the screen
    must be the one Textual's own styles cache and filters draw: dim text blended, ANSI
    colours converted or not, in any theme, and with tint, text opacity or an outline (which
    the cached frame leaves to Textual)."""
    asyncio.run(_drawn_like_textual())


async def _drawn_like_textual() -> None:
    source = ScriptedSource([])
    app = build_app(source, clock=lambda: EPOCH, hostname="gpu-node-07")
    async with app.run_test(size=(200, 50)) as pilot:
        source.push(machine(8, jobs=ddp_job(8)))
        for theme in ("textual-dark", "ansi-dark", "textual-light"):
            app.theme = theme
            await pilot.pause()
            assert _screen(app) == _screen(app, textual=True), theme
        app.query_one(GpuPanel).styles.tint = "red 30%"
        app.query_one(CpuPanel).styles.text_opacity = 0.5
        app.query_one(DiskPanel).styles.outline = ("heavy", "red")
        await pilot.pause()
        assert _screen(app) == _screen(app, textual=True)


def _screen(app: TraintopApp, *, textual: bool = False) -> list[list[tuple]]:
    """Every cell run of a fresh full render, text and Rich style: as the panels draw it, or
    (``textual``) through Textual's own styles cache with every filter of the app."""
    panels = list(app.screen.query(LineWidget))
    for widget in panels:
        widget.notify_style_update()  # drops the panels' strips, run styles and frames
        widget._styles_cache = StylesCache() if textual else FramedRows()
        if textual:  # run styles unconverted, the app's filters applied per line
            widget._truecolor = ([], widget.background_colors[1].rich_color)
            widget.get_line_filters = app.get_line_filters
    strips = app.screen._compositor.render_strips()
    for widget in panels:
        vars(widget).pop("get_line_filters", None)
    return [[(segment.text, segment.style) for segment in strip] for strip in strips]
