"""The Training panel mounted in a tiny app, fed realistic job tuples; plus its pure helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.color import Color

from collectors.snapshot import JobSnapshot, PhaseShare
from tests import job_fixtures as jf
from tui.widgets.job_cards import EMPTY_MESSAGE, JobCard, JobPanel, fmt_seconds
from tui.widgets.training import (
    HISTORY_LEN,
    TrainingCard,
    TrainingPanel,
    find_straggler,
    keep_last_numbers,
    segments,
)

CSS = Path(__file__).resolve().parent.parent / "tui" / "styles" / "training.tcss"


class PanelApp(App[None]):
    """One panel filling the screen, styled by the shipped stylesheet."""

    CSS_PATH = CSS

    def __init__(self, panel: JobPanel) -> None:
        super().__init__()
        self.panel = panel

    def compose(self) -> ComposeResult:
        yield self.panel


def run_panel(
    panel: JobPanel,
    script: Callable[[PanelApp], Awaitable[None]],
    size: tuple[int, int] = (80, 60),
) -> None:
    """Mount ``panel`` headless at ``size`` and run ``script`` against it."""

    async def main() -> None:
        app = PanelApp(panel)
        async with app.run_test(size=size) as pilot:
            app.pilot = pilot
            await script(app)

    asyncio.run(main())


async def feed(app: PanelApp, jobs: tuple[JobSnapshot, ...]) -> None:
    """One tick: hand the jobs to the panel and let Textual mount, lay out and paint."""
    app.panel.update_jobs(jobs)
    await app.pilot.pause()


def cards(panel: JobPanel) -> list[JobCard]:
    return list(panel.query(JobCard))


def texts(panel: JobPanel) -> list[str]:
    return [card.render().plain for card in cards(panel)]


def theme_color(app: App, name: str) -> Color:
    return Color.parse(app.theme_variables[name])


def test_empty_state_names_how_to_attach() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, ())
        empty = app.panel.query_one(".job-empty")
        assert empty.display and str(empty.render()) == EMPTY_MESSAGE
        assert cards(app.panel) == []
        assert app.panel.border_title == "7 Training"

    run_panel(TrainingPanel(), script)


def test_data_bound_job_shows_rates_breakdown_and_legend() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, (jf.data_bound_job(),))
        (text,) = texts(app.panel)
        for expected in ("resnet50-imagenet", "pid 4242", "● live", "step 12,345", "steps/s 3.10",
                         "samples/s 397", "step p50 311 ms", "p95 402 ms", "GPU busy 34%",
                         "11.2 GiB (14.0 GiB reserved)", "data 62% 193 ms", "bwd 19%",
                         "other 2%"):  # fmt: skip
            assert expected in text
        assert "lost" not in text
        card = cards(app.panel)[0]
        assert "█" * card.content_size.width in text.splitlines()
        assert card.region.height == len(text.splitlines())
        assert not app.panel.query_one(".job-empty").display

    run_panel(TrainingPanel(), script)


def test_multi_rank_job_is_one_card_with_straggler_highlighted() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, jf.multi_rank_job())
        (card,) = cards(app.panel)
        lines = card.render().plain.splitlines()
        assert "rank 0/4" in lines[0]
        assert "samples/s (all ranks) 61.5" in card.render().plain
        rows = {line.split()[0]: line for line in lines if line[:4].strip() in "0123"}
        assert set(rows) == {"0", "1", "2", "3"}
        assert "◀ slowest, +42% vs median" in rows["2"]
        assert all("slowest" not in rows[r] for r in "013")
        assert "rank 2 holds the run back: 42% more own work" in card.render().plain
        span_styles = [s.style for s in card.render().spans if s.style is not None]
        straggler = card.style("training--straggler")
        assert straggler in span_styles
        assert straggler.foreground == theme_color(app, "error")

    run_panel(TrainingPanel(), script)


def test_balanced_ranks_call_out_nobody_and_missing_ranks_are_named() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, jf.balanced_multi_rank_job()[:3])
        (text,) = texts(app.panel)
        assert "slowest" not in text and "holds the run back" not in text
        assert "3 of 4 ranks attached." in text

    run_panel(TrainingPanel(), script)


def test_crashed_job_keeps_its_last_numbers_in_error_colour() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, (jf.crashed_job_before(),))
        await feed(app, (jf.crashed_job(),))
        (text,) = texts(app.panel)
        assert "✗ crashed" in text and "step 5,120" in text
        assert "steps/s 2.44" in text and "step p50 409 ms" in text
        assert "lost 17 records" in text
        card = cards(app.panel)[0]
        assert card.style("training--crashed").foreground == theme_color(app, "error")

    run_panel(TrainingPanel(), script)


def test_stalled_job_says_for_how_long() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, (jf.stalled_job(),))
        (text,) = texts(app.panel)
        assert "◐ stalled · no step for 34 s" in text
        assert "steps/s n/a" in text
        card = cards(app.panel)[0]
        assert card.style("training--stalled").foreground == theme_color(app, "warning")

    run_panel(TrainingPanel(), script)


def test_identical_input_repaints_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    refreshed: list[JobCard] = []
    original = JobCard.refresh

    def counting_refresh(self: JobCard, *args: object, **kwargs: object) -> JobCard:
        refreshed.append(self)
        return original(self, *args, **kwargs)

    async def script(app: PanelApp) -> None:
        jobs = (jf.data_bound_job(), *jf.multi_rank_job(), jf.stalled_job())
        await feed(app, jobs)
        before = cards(app.panel)
        monkeypatch.setattr(JobCard, "refresh", counting_refresh)
        await feed(app, jobs)
        await feed(app, tuple(replace(job) for job in jobs))  # equal, not identical
        assert refreshed == []
        await feed(app, (jobs[0], *jobs[1:-1], replace(jobs[-1], last_step_age_s=35.4)))
        assert cards(app.panel) == before  # same card objects, none rebuilt
        assert refreshed == [before[-1]]

    run_panel(TrainingPanel(), script)


def test_jobs_given_before_mount_are_shown() -> None:
    panel = TrainingPanel()
    panel.update_jobs((jf.stalled_job(),))

    async def script(app: PanelApp) -> None:
        await app.pilot.pause()
        assert "bert-pretrain" in texts(app.panel)[0]

    run_panel(panel, script)


@pytest.mark.parametrize("state", ["finished", "restarted"])
def test_ended_states_are_muted(state: str) -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, (replace(jf.data_bound_job(), state=state),))
        card = cards(app.panel)[0]
        assert state in texts(app.panel)[0]
        badge = next(s for s in card.render().spans if s.style == card.style(f"training--{state}"))
        assert badge.style.foreground == card.style("job--label").foreground

    run_panel(TrainingPanel(), script)


def test_history_is_bounded_and_drawn() -> None:
    async def script(app: PanelApp) -> None:
        job = jf.data_bound_job()
        for tick in range(HISTORY_LEN + 40):
            app.panel.update_jobs((replace(job, step_time_p50_s=0.3 + (tick % 10) / 100),))
        await app.pilot.pause()
        assert len(app.panel._history[job.pid]) == HISTORY_LEN
        history_line = next(ln for ln in texts(app.panel)[0].splitlines() if "–" in ln)
        assert history_line.startswith("step p50 ") and history_line.endswith("300 ms–390 ms")
        assert "█" in history_line and "▁" in history_line

    run_panel(TrainingPanel(), script)


def test_cards_follow_jobs_and_focus() -> None:
    async def script(app: PanelApp) -> None:
        jobs = (jf.data_bound_job(), *jf.multi_rank_job(), jf.stalled_job())
        await feed(app, jobs)
        assert [t.split()[0] for t in texts(app.panel)] == [
            "resnet50-imagenet", "llama-ft", "bert-pretrain"]  # fmt: skip
        app.panel.focus_pid = 5102
        await app.pilot.pause()
        (text,) = texts(app.panel)
        assert "pid 5102  rank 2/4" in text
        app.panel.focus_pid = 99999  # gone: show everything rather than nothing
        await app.pilot.pause()
        await feed(app, jobs[:1])
        assert len(cards(app.panel)) == 1

    run_panel(TrainingPanel(), script)


def test_narrow_panel_wraps_instead_of_cropping() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, (jf.data_bound_job(), *jf.multi_rank_job()))
        for card in cards(app.panel):
            lines = card.render().plain.splitlines()
            assert max(len(line) for line in lines) <= card.content_size.width
        text = "\n".join(texts(app.panel))
        for expected in ("steps/s 3.10", "p95 402 ms", "GPU busy 34%", "rank steps/s"):
            assert expected in text

    run_panel(TrainingPanel(), script, size=(44, 80))


def test_odd_input_renders_without_error() -> None:
    bare = JobSnapshot(pid=1, name="x" * 200, rank=0, local_rank=0, world_size=1,
                       state="paused", steps_total=0, steps_per_s=None, samples_per_s=None,
                       step_time_p50_s=None, step_time_p95_s=None, data_wait_share=None,
                       data_wait_p50_s=None, data_wait_p95_s=None, batches_per_s=None,
                       gpu_busy_share=None)  # fmt: skip

    async def script(app: PanelApp) -> None:
        await feed(app, (bare,))
        (text,) = texts(app.panel)
        assert "paused" in text and "no step breakdown reported" in text

    run_panel(TrainingPanel(), script)


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(None, "n/a"), (0.00042, "420 µs"), (0.0123, "12.3 ms"), (0.311, "311 ms"),
     (1.5, "1.50 s"), (754.0, "754 s")],
)  # fmt: skip
def test_fmt_seconds(seconds: float | None, expected: str) -> None:
    assert fmt_seconds(seconds) == expected


def test_find_straggler_uses_own_work_not_synced_step_time() -> None:
    assert find_straggler(jf.multi_rank_job()) == (2, pytest.approx(0.416, abs=0.005))
    assert find_straggler(jf.balanced_multi_rank_job()) is None
    assert find_straggler(jf.multi_rank_job()[:2]) is None  # no median to speak of


def test_keep_last_numbers_only_for_ended_jobs() -> None:
    before, crashed = jf.crashed_job_before(), jf.crashed_job()
    assert keep_last_numbers(crashed, before).steps_per_s == before.steps_per_s
    assert keep_last_numbers(crashed, before).lost_records == crashed.lost_records
    stalled = jf.stalled_job()
    assert keep_last_numbers(stalled, jf.data_bound_job(stalled.pid)) is stalled


def test_segments_fill_the_step() -> None:
    job = jf.data_bound_job()
    assert [(name, cls) for name, _, _, cls in segments(job)][-1] == ("other", "other")
    assert sum(share for _, share, _, _ in segments(job)) == pytest.approx(1.0)
    custom = replace(job, phases=(PhaseShare("h2d", 0.1, 0.01), PhaseShare("comm", 0.9, 0.1)))
    assert [cls for *_, cls in segments(custom)] == ["custom-alt", "custom"]
    only_wait = jf.no_worker_job()
    assert [name for name, *_ in segments(only_wait)] == ["data", "compute"]


def test_training_card_declares_every_style_it_uses() -> None:
    used = {f"training--{cls}" for job in jf.multi_rank_job() for *_, cls in segments(job)}
    assert used <= TrainingCard.COMPONENT_CLASSES
