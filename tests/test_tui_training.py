"""The Training panel's jobs table: grouping, figures, order, collapse, and the panel mounted
in a tiny app at fixed sizes (rows that fit, repaint only on change)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from textual.app import App, ComposeResult

from tests import job_fixtures as jf
from tests import snapshot_fixtures as sf
from traintop.collectors.snapshot import JobSnapshot, PhaseShare
from traintop.tui.widgets.job_detail import COMM_STYLE, segments
from traintop.tui.widgets.panel import LineWidget
from traintop.tui.widgets.training import EMPTY_MESSAGE, HISTORY_LEN, TrainingPanel
from traintop.views.job_groups import (
    ENDED_COLLAPSE_S,
    EndedSummary,
    JobGroup,
    groups_of,
    keep_last_numbers,
    natural_key,
    table_rows,
)

CSS = Path(__file__).resolve().parent.parent / "tui" / "styles" / "training.tcss"
NOW = sf.EPOCH


class PanelApp(App[None]):
    """One panel filling the screen (no size cap: the tiny app has no #jobs-row)."""

    CSS = "TrainingPanel, DataLoaderPanel { height: auto; max-height: 100%; }"

    def __init__(self, panel: LineWidget) -> None:
        super().__init__()
        self.panel = panel

    def compose(self) -> ComposeResult:
        yield self.panel


def run_panel(
    panel: LineWidget,
    script: Callable[[PanelApp], Awaitable[None]],
    size: tuple[int, int] = (160, 40),
) -> None:
    """Mount ``panel`` headless at ``size`` and run ``script`` against it."""

    async def main() -> None:
        app = PanelApp(panel)
        async with app.run_test(size=size) as pilot:
            app.pilot = pilot
            await script(app)

    asyncio.run(main())


async def feed(app: PanelApp, jobs: tuple[JobSnapshot, ...], tick: int = 0) -> None:
    """One tick: the panel gets a snapshot holding ``jobs``, then Textual lays out and paints."""
    app.panel.update_jobs(sf.machine(gpus=0, jobs=jobs, tick=tick))
    await app.pilot.pause()


def text(panel: LineWidget) -> str:
    return panel.render().plain


def groups(jobs: tuple[JobSnapshot, ...], now: float = NOW) -> list[JobGroup]:
    return groups_of(jobs, now)


def test_ranks_of_one_job_fold_into_one_group_with_job_figures() -> None:
    (group,) = groups(sf.ddp_job(8))
    assert group.name == "llama-7b" and len(group.ranks) == 8 and group.rank_count == "8"
    assert group.steps_per_s == min(j.steps_per_s for j in group.ranks)
    assert group.samples_per_s == pytest.approx(sum(j.samples_per_s for j in group.ranks))
    assert group.data_wait_share == pytest.approx(0.21)
    rank, gap = group.slowest
    assert rank == 2 and 0.2 < gap < 0.4  # the straggler's own work, not its synced step


def test_samples_unknown_on_one_rank_is_unknown_not_a_partial_sum() -> None:
    jobs = sf.ddp_job(4)
    jobs = (*jobs[:3], replace(jobs[3], samples_per_s=None))
    assert groups(jobs)[0].samples_per_s is None


def test_partly_seen_world_says_how_many_ranks() -> None:
    assert groups(sf.ddp_job(8)[:6])[0].rank_count == "6/8"


def test_natural_order_running_first() -> None:
    assert sorted(["sweep10", "sweep2", "Sweep1"], key=natural_key) == [
        "Sweep1", "sweep2", "sweep10"]  # fmt: skip
    names = [g.name for g in groups(sf.sweep())]
    assert names[:6] == [f"sweep{i}" for i in range(19, 25)]
    assert names[6:9] == ["sweep1", "sweep2", "sweep3"]  # ended runs after, in natural order


def test_jobs_ended_long_ago_fold_into_one_summary_row() -> None:
    rows = table_rows(groups(sf.sweep()), NOW, expanded=False)
    assert [r.name for r in rows[:8] if isinstance(r, JobGroup)] == [
        *(f"sweep{i}" for i in range(19, 25)), "sweep17", "sweep18"]  # fmt: skip
    summary = rows[-1]
    assert isinstance(summary, EndedSummary) and len(rows) == 9
    assert summary.count == 16 and dict(summary.states) == {"finished": 13, "crashed": 3}
    expanded = table_rows(groups(sf.sweep()), NOW, expanded=True)
    assert len(expanded) == 9 + 16 and isinstance(expanded[8], EndedSummary)


def test_an_ended_job_keeps_its_row_for_the_collapse_delay() -> None:
    just = sf.sweep_run(1, state="finished", ended_s=ENDED_COLLAPSE_S - 5)
    later = sf.sweep_run(1, state="finished", ended_s=ENDED_COLLAPSE_S + 5)
    assert isinstance(table_rows(groups((just,)), NOW, False)[0], JobGroup)
    assert isinstance(table_rows(groups((later,)), NOW, False)[0], EndedSummary)


def test_keep_last_numbers_only_for_ended_jobs() -> None:
    before, crashed = jf.crashed_job_before(), jf.crashed_job()
    assert keep_last_numbers(crashed, before).steps_per_s == before.steps_per_s
    assert keep_last_numbers(crashed, before).lost_records == crashed.lost_records
    stalled = jf.stalled_job()
    assert keep_last_numbers(stalled, jf.data_bound_job(stalled.pid)) is stalled


def test_segments_fill_the_step_and_waiting_on_peers_stands_out() -> None:
    job = jf.data_bound_job()
    assert [name for name, *_ in segments(job)][-1] == "other"
    assert sum(share for _, share, _, _ in segments(job)) == pytest.approx(1.0)
    ddp = sf.ddp_rank(0, 8)
    styles = {name: style for name, _, _, style in segments(ddp)}
    assert styles["allreduce"] == COMM_STYLE == "$error"
    custom = replace(job, phases=(PhaseShare("h2d", 0.1, 0.01), PhaseShare("fetch", 0.9, 0.1)))
    assert len({style for *_, style in segments(custom)}) == 2
    assert [name for name, *_ in segments(jf.no_worker_job())] == ["data", "compute"]


def test_empty_state_names_how_to_attach() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, ())
        assert text(app.panel) == EMPTY_MESSAGE
        assert app.panel.border_title == "7 Training"

    run_panel(TrainingPanel(), script)


def test_eight_rank_job_is_one_row_with_its_ranks_below() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, sf.ddp_job(8))
        lines = text(app.panel).splitlines()
        assert lines[0].split()[:3] == ["JOB", "RANKS", "STATE"]
        job = lines[1]
        assert job.startswith("▶ llama-7b") and " 8 ● live " in job and "r2 +" in job
        ranks = [ln for ln in lines if ln[:6].strip().isdigit()]
        assert [int(ln.split()[0]) for ln in ranks] == list(range(8))
        assert "fastest" in "".join(ranks) and "+" in ranks[2]
        assert "■ allreduce" in text(app.panel)
        assert app.panel.border_subtitle == "llama-7b · phases: mean of 8 ranks"
        assert len(lines) == app.panel.content_size.height

    run_panel(TrainingPanel(), script)


def test_unknown_samples_show_a_dash_never_zero() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, (replace(jf.data_bound_job(), samples_per_s=None),))
        row = text(app.panel).splitlines()[1]
        assert " — " in row and " 0 " not in row

    run_panel(TrainingPanel(), script)


def test_crashed_job_keeps_its_last_numbers() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, (jf.crashed_job_before(),))
        await feed(app, (jf.crashed_job(),))
        row = text(app.panel).splitlines()[1]
        assert "✗ crashed" in row and "2.44" in row and "409 ms" in row and "3 s ago" in row

    run_panel(TrainingPanel(), script)


def test_sixty_four_ranks_fit_the_height_and_scroll() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, sf.ddp_job(64))
        lines = text(app.panel).splitlines()
        assert len(lines) == app.panel.content_size.height == 20
        assert max(len(line) for line in lines) <= app.panel.content_size.width
        assert any(line.rstrip().endswith("more") for line in lines)

    run_panel(TrainingPanel(), script, size=(80, 20))


def test_identical_input_repaints_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    refreshed: list[object] = []

    async def script(app: PanelApp) -> None:
        jobs = sf.ddp_job(8)
        await feed(app, jobs)
        original = type(app.panel).refresh

        def counting(self, *args, **kwargs):
            refreshed.extend(args)  # the regions repainted
            return original(self, *args, **kwargs)

        monkeypatch.setattr(type(app.panel), "refresh", counting)
        await feed(app, jobs)
        await feed(app, tuple(replace(job) for job in jobs))  # equal, not identical
        assert refreshed == []
        await feed(app, (*jobs[:7], replace(jobs[7], steps_per_s=3.0)))
        rows = sorted(region.y for region in refreshed)
        assert rows == [1, 11]  # the job row (its steps/s is the slowest rank's) and rank 7

    run_panel(TrainingPanel(), script)


def test_history_is_bounded_and_drawn_in_the_row() -> None:
    async def script(app: PanelApp) -> None:
        job = jf.data_bound_job()
        for tick in range(HISTORY_LEN + 40):
            snapshot = sf.machine(
                gpus=0, jobs=(replace(job, step_time_p50_s=0.3 + tick % 10 / 100),)
            )
            app.panel.update_jobs(snapshot)
        await app.pilot.pause()
        (history,) = app.panel._history.values()
        assert len(history) == HISTORY_LEN
        row = text(app.panel).splitlines()[1]
        assert "█" in row and "▁" in row

    run_panel(TrainingPanel(), script)


def test_narrow_panel_keeps_the_key_columns_and_draws_history_below() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, (jf.data_bound_job(),))
        await feed(app, (replace(jf.data_bound_job(), step_time_p50_s=0.35),))
        lines = text(app.panel).splitlines()
        assert max(len(line) for line in lines) <= app.panel.content_size.width
        for label in ("JOB", "RANKS", "STATE", "STEPS/S", "SAMPLES/S", "DATA WAIT"):
            assert label in lines[0]
        assert "STEP TIME" not in lines[0]
        assert any(line.startswith("step p50 ") for line in lines)

    run_panel(TrainingPanel(), script, size=(80, 30))


def test_a_running_job_with_a_crashed_rank_says_so() -> None:
    ranks = sf.ddp_job(4)
    ranks = (*ranks[:3], replace(ranks[3], state="crashed", last_step_age_s=2.0))

    async def script(app: PanelApp) -> None:
        await feed(app, ranks)
        lines = text(app.panel).splitlines()
        assert " 4 ● live ✗1 " in lines[1]
        rank3 = next(ln for ln in lines if ln.split()[:1] == ["3"])
        assert rank3.rstrip().endswith("✗ crashed")

    run_panel(TrainingPanel(), script)
