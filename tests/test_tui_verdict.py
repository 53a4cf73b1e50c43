"""The verdict in the UI: banner, evidence highlight, details screen, pause, the runner.

Pilot tests push scripted snapshots through the app's source; each push diagnoses the snapshot
at once and posts it with its verdict, so one UI turn per snapshot (``feed_verdicts``) makes
every run deterministic.
"""

from __future__ import annotations

import asyncio
import functools
import itertools

from tests.diagnosis_factories import Scene
from tests.snapshot_fixtures import EPOCH, ScriptedSource
from traintop.diagnosis.api import diagnose
from traintop.diagnosis.verdict_runner import VerdictRunner
from traintop.tui.app import SnapshotReady, build_app
from traintop.tui.screens.details import DetailsScreen
from traintop.tui.widgets.verdict import VerdictBanner

DATA_CPU = Scene(data_wait=0.62, worker_cpu=98)
THERMAL = Scene(reasons=0x20 | 0x8, temp=88, sm_clock=1300, gpu_util=90)


def async_test(test):
    """Run an async Pilot test on a fresh event loop (no async pytest plugin is installed)."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


def make(first):
    source = ScriptedSource([first])
    return source, build_app(source, clock=lambda: EPOCH)


async def feed_verdicts(pilot, source, snapshots) -> None:
    """Push each snapshot and let its verdict reach the screen before the next one."""
    app = pilot.app
    for snapshot in snapshots:
        source.push(snapshot)
        await pilot.pause()
        assert app.snapshot is snapshot or app.paused


def banner(app) -> VerdictBanner:
    return app.query_one(VerdictBanner)


def banner_text(app) -> str:
    return banner(app).render().plain


async def settle(pilot, source, window) -> None:
    """Start the app on ``window[0]`` and feed the rest."""
    await pilot.pause()
    assert pilot.app.verdicts.latest is not None
    await feed_verdicts(pilot, source, window[1:])


@async_test
async def test_unknown_while_collecting_then_data_cpu_with_numbers():
    window = DATA_CPU.window(n=12)  # judged every other tick after the first verdict (tick 3)
    source, app = make(window[0])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, source, window[:2])
        assert banner_text(app).startswith("◇ NO VERDICT YET — collecting data: 1.0 of 3 s")
        assert banner(app).has_class("-unknown")
        await feed_verdicts(pilot, source, window[2:])
        text = banner_text(app)
        assert text.startswith("◆ DATA LOADING (CPU) — data wait 62 % of time")
        assert "4/4 workers at 98 % CPU" in text and "conf 95 %" in text
        assert "for 8 s" in text and text.endswith("d: details")
        assert banner(app).has_class("-warning") and not banner(app).has_class("-unknown")


@async_test
async def test_data_cpu_highlights_training_and_dataloader_panels():
    window = DATA_CPU.window()
    source, app = make(window[0])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, source, window)
        marked = {w.id for w in app.query(".-evidence")}
        assert marked == {"training", "dataloader"}
        assert not app.query_one("#gpu").has_class("-evidence")


@async_test
async def test_thermal_throttle_marks_the_gpu_panel_in_error_colour():
    window = THERMAL.window()
    source, app = make(window[0])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, source, window)
        assert banner_text(app).startswith("◆ THERMAL THROTTLING — GPU 0: SW Thermal Slowdown")
        assert banner(app).has_class("-error")
        assert [w.id for w in app.query(".-evidence-error")] == ["gpu"]
        gpu_border = app.query_one("#gpu").styles.border_top[1]
        assert gpu_border != app.query_one("#cpu").styles.border_top[1]


@async_test
async def test_evidence_classes_change_only_when_the_verdict_moves():
    window = DATA_CPU.window(n=16)
    source, app = make(window[0])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, source, window[:6])
        highlight = app.verdicts._highlight
        before = dict(highlight.marks)
        assert highlight.apply(app.screen, before) == 0
        await feed_verdicts(pilot, source, window[6:])
        assert highlight.marks == before


@async_test
async def test_wide_banner_has_a_second_line_with_summary_and_remedy():
    window = DATA_CPU.window()
    source, app = make(window[0])
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot, source, window)
        lines = banner_text(app).splitlines()
        assert len(lines) == 2 and banner(app).size.height == 2
        assert "Input pipeline limited by CPU: 62 % of time lost" in lines[1]
        assert "try: num_workers 4 → 8: ≈ 1.8× (4.0 → 7.1 steps/s), then CPU-bound" in (lines[1])


@async_test
async def test_d_opens_details_with_evidence_remedies_history_and_escape_closes():
    window = DATA_CPU.window(n=12)  # the last tick is judged (every other one from tick 3)
    source, app = make(window[0])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, source, window)
        await pilot.press("d")
        assert isinstance(app.screen, DetailsScreen)
        screen = app.screen
        evidence = screen.query_one("#details-evidence").render().plain
        assert "• data wait 62 % of time   [training panel]" in evidence
        remedies = screen.query_one("#details-remedies").render().plain
        assert "1. num_workers 4 → 8: ≈ 1.8× (4.0 → 7.1 steps/s), then CPU-bound" in (remedies)
        assert "raise DataLoader num_workers from 4 to 8 (8 logical CPUs)" in remedies
        assert "2. augmentation on the GPU: up to" in remedies
        finding = screen.query_one("#details-finding").render().plain
        assert "confidence 95 %" in finding and "attach mode" in finding
        history = screen.query_one("#details-history").render().plain
        assert "DATA LOADING (CPU) 8 s ← NO VERDICT YET 3 s" in history
        assert "data wait" in history and "62 %" in history
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailsScreen)


@async_test
async def test_click_on_banner_opens_details_and_details_follow_new_verdicts():
    window = DATA_CPU.window(n=14)
    source, app = make(window[0])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, source, window[:11])
        await pilot.click(VerdictBanner)
        assert isinstance(app.screen, DetailsScreen)
        await feed_verdicts(pilot, source, window[11:])
        assert "held for 10 s" in app.screen.query_one("#details-finding").render().plain
        await pilot.press("q")
        assert not isinstance(app.screen, DetailsScreen)
        assert "for 10 s" in banner_text(app)


@async_test
async def test_pause_freezes_the_banner_and_resume_catches_up():
    window = DATA_CPU.window()
    source, app = make(window[0])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, source, window[:2])
        await pilot.press("p")
        frozen = banner_text(app)
        await feed_verdicts(pilot, source, window[2:])
        assert banner_text(app) == frozen
        assert app.verdicts.latest.verdict.primary.bottleneck == "data_cpu"
        await pilot.press("p")
        assert banner_text(app).startswith("◆ DATA LOADING (CPU)")


class _Broken:
    min_window_s = 3.0

    def update(self, window, *, job_pid=None):
        raise ValueError("bad window")


@async_test
async def test_one_message_carries_the_snapshot_and_its_verdict():
    window = DATA_CPU.window()
    source, app = make(window[0])
    seen: list = []
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, source, window[:3])
        original = app.post_message
        app.post_message = lambda message: seen.append(message) or original(message)
        await feed_verdicts(pilot, source, window[3:5])
        seen = [m for m in seen if isinstance(m, SnapshotReady)]
        assert [m.snapshot for m in seen] == window[3:5]
        assert seen[-1].verdict is app.verdicts.shown
        assert app.verdicts.shown.history[-1].monotonic == window[4].monotonic
        assert banner_text(app).startswith("◆ DATA LOADING (CPU)")


@async_test
async def test_a_failing_engine_shows_in_the_banner_and_snapshots_still_arrive():
    window = DATA_CPU.window()
    source, app = make(window[0])
    app.pipeline.runner = VerdictRunner(stabilizer=_Broken())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, source, window[:4])
        assert app.snapshot is window[3]
        assert banner_text(app).startswith("◇ NO VERDICT YET — diagnosis failed: ValueError")


@async_test
async def test_d_is_in_footer_bindings_and_help():
    _, app = make(DATA_CPU.window()[0])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        keys = app.screen.query_one("#help-keys").render().plain
        assert "       d  Details" in keys


def test_runner_does_not_flicker_when_windows_alternate():
    """Per-window verdicts flip between two findings; the banner's stays put.  The input
    changes every second tick (windows are judged every other tick: a flip every tick would
    show the runner one side only), and the thermal side loses a clear share to its clocks
    (a near tie would go to data_cpu every time)."""
    a, b = DATA_CPU, THERMAL.but(data_wait=0.03, sm_clock=900)
    snaps = [(a if i // 2 % 2 == 0 else b).snapshot(1000.0 + i, i) for i in range(20)]
    fresh = [diagnose(snaps[i - 4 : i + 1]).primary.bottleneck for i in range(4, 20)]
    flips = sum(x != y for x, y in itertools.pairwise(fresh))
    assert flips == len(fresh) // 2 - 1, fresh  # the input really flips every second tick
    runner = VerdictRunner(window_s=4.0)
    shown = [runner.update(snap).verdict.primary.bottleneck for snap in snaps]
    assert shown[:3] == ["unknown"] * 3  # under 3 s of samples
    assert set(shown[3:]) == {shown[3]} and shown[3] in fresh, shown


def test_runner_diagnoses_every_snapshot_exactly_once():
    runner = VerdictRunner()
    updates = [runner.update(snap) for snap in DATA_CPU.window(n=5)]
    assert runner.runs == 5
    assert [len(u.history) for u in updates] == [1, 2, 3, 4, 5]


def _run_all(snapshots, **kwargs) -> list:
    """Feed ``snapshots`` through a runner one at a time; return every delivered update."""
    runner = VerdictRunner(**kwargs)
    return [runner.update(snap) for snap in snapshots]


def test_runner_window_is_bounded_in_time_and_count_and_restarts_when_the_clock_goes_back():
    slow = _run_all(DATA_CPU.window(n=45, dt=1.0))
    assert slow[-1].verdict.window_s == 30.0
    fast = _run_all(DATA_CPU.window(n=60, dt=0.25))
    assert fast[-1].verdict.window_s == 39 * 0.25
    replay = _run_all([*DATA_CPU.window(n=8), *DATA_CPU.window(n=2, start=500.0)])
    assert replay[-1].verdict.primary.summary == "collecting data: 1.0 of 3 s"
    assert [p.monotonic for p in replay[-1].history] == [500.0, 501.0]


def test_runner_survives_an_engine_error_and_says_so():
    updates = _run_all(DATA_CPU.window(n=2), stabilizer=_Broken())
    assert [u.verdict.primary.summary for u in updates] == [
        "diagnosis failed: ValueError: bad window"
    ] * 2
    assert updates[-1].history[-1].bottleneck == "unknown"
