"""The monitor's start: its first frame is whole (keys, banner, size classes) as painted, with
nothing left for a second layout to bring; the keys line follows the focus and takes clicks."""

from __future__ import annotations

from textual.screen import Screen

from tests.snapshot_fixtures import ddp_job, series
from tests.test_tui_app import async_test, make
from traintop.tui.widgets.key_bar import KeyBar
from traintop.tui.widgets.verdict import VerdictBanner


def _keys(app) -> str:
    return app.query_one(KeyBar).render().plain


@async_test
async def test_the_keys_are_in_the_first_frame():
    """Textual's Footer composed its keys after the first paint (two more paints, a fifth
    of a second later); the key bar draws them when it is first painted."""
    first, *_ = series(1, gpus=8)
    _, app = make([], first=first)
    async with app.run_test(size=(120, 40)):
        keys = _keys(app)
        assert keys.startswith("s Sort K Kthreads q Quit p Pause + Slower - Faster ? Help")
        assert keys.rstrip().endswith("▏^p palette")
        assert len(keys) == 120


@async_test
async def test_the_keys_follow_the_focus_and_a_click_presses_one():
    ticks = series(2, gpus=8, job_source=lambda tick: ddp_job(8, tick))
    _, app = make(ticks)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.press("j")  # the jobs table takes the keys
        await pilot.pause()
        assert _keys(app).startswith("↵ Ranks e Ended jobs")
        x = _keys(app).index("p Pause")
        await pilot.click(KeyBar, offset=(x, 0))
        assert app.paused


@async_test
async def test_the_size_classes_and_the_banner_are_there_before_the_first_layout():
    """Textual sets the breakpoint classes on the screen's first Resize, after the first paint:
    a restyle and a relayout of the whole screen, and the banner's lines came with the
    relayout that its Resize asked for."""
    seen: list = []
    first, *_ = series(1, gpus=8)
    _, app = make([], first=first)
    original = Screen._refresh_layout

    def layout(screen, *args, **kwargs):
        if not seen and screen is app.screen:
            seen.append(set(screen.classes))
        original(screen, *args, **kwargs)
        if len(seen) == 1:
            seen.append(app.query_one(VerdictBanner).lines)

    Screen._refresh_layout = layout  # pyright: ignore[reportAttributeAccessIssue]
    try:
        async with app.run_test(size=(200, 50)):
            pass
    finally:
        Screen._refresh_layout = original  # pyright: ignore[reportAttributeAccessIssue]
    assert {"-wide", "-tall"} <= seen[0] and not {"-narrow", "-short"} & seen[0]
    assert seen[1][0].plain.startswith("◇ NO VERDICT YET — collecting data")
