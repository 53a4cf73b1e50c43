"""The DataLoader panel mounted in a tiny app: rates, wait share colours, worker rows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests import job_fixtures as jf
from tests.test_tui_training import PanelApp, cards, feed, run_panel, texts, theme_color
from tui.widgets.dataloader import DataLoaderCard, DataLoaderPanel
from tui.widgets.job_cards import EMPTY_MESSAGE, JobCard


def test_data_bound_job_shows_rates_and_every_worker() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, (jf.data_bound_job(),))
        (text,) = texts(app.panel)
        for expected in ("resnet50-imagenet", "pid 4242", "workers 4", "batches/s 3.10",
                         "samples/s 397", "wait/batch p50 193 ms", "p95 262 ms",
                         "data wait 62% of step"):  # fmt: skip
            assert expected in text
        rows = [line.split() for line in text.splitlines() if line.strip().startswith("424")]
        assert [row[0] for row in rows] == ["4243", "4244", "4245", "4246"]
        assert rows[0][-5:] == ["98%", "1.2", "GiB", "45.0", "MB/s"]
        assert app.panel.border_title == "8 DataLoader"

    run_panel(DataLoaderPanel(), script)


def test_hot_workers_and_data_wait_are_coloured() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, (jf.data_bound_job(),))
        card = cards(app.panel)[0]
        styles = [span.style for span in card.render().spans]
        assert card.style("job--error") in styles  # 62 % > 60 %
        assert card.style("dataloader--bar-hot") in styles  # 98 % CPU workers
        assert card.style("dataloader--bar-hot").foreground == theme_color(app, "warning")
        assert card.style("job--error").foreground == theme_color(app, "error")

    run_panel(DataLoaderPanel(), script)


@pytest.mark.parametrize(
    ("share", "component"),
    [(0.25, "job--value"), (0.45, "job--warning"), (0.65, "job--error"), (None, "job--value")],
)
def test_wait_share_thresholds(share: float | None, component: str) -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, (replace(jf.data_bound_job(), data_wait_share=share),))
        card = cards(app.panel)[0]
        assert isinstance(card, DataLoaderCard)
        chip = card._wait_share(share)
        assert [span.style for span in chip.spans][1] == card.style(component)

    run_panel(DataLoaderPanel(), script)


def test_job_without_workers_says_where_loading_happens() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, (jf.no_worker_job(),))
        (text,) = texts(app.panel)
        assert "workers 0" in text and "loaded in the training process" in text

    run_panel(DataLoaderPanel(), script)


def test_each_rank_gets_its_own_card_and_empty_state_returns() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, jf.multi_rank_job())
        assert [t.split("\n")[0] for t in texts(app.panel)] == [
            f"llama-ft  pid {5100 + r}  rank {r}/4  workers 1" for r in range(4)
        ]
        await feed(app, ())
        assert cards(app.panel) == []
        assert str(app.panel.query_one(".job-empty").render()) == EMPTY_MESSAGE

    run_panel(DataLoaderPanel(), script)


def test_identical_input_repaints_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    refreshed: list[JobCard] = []
    original = JobCard.refresh

    def counting_refresh(self: JobCard, *args: object, **kwargs: object) -> JobCard:
        refreshed.append(self)
        return original(self, *args, **kwargs)

    async def script(app: PanelApp) -> None:
        jobs = (jf.data_bound_job(), jf.stalled_job())
        await feed(app, jobs)
        monkeypatch.setattr(JobCard, "refresh", counting_refresh)
        await feed(app, tuple(replace(job) for job in jobs))
        assert refreshed == []
        await feed(app, (replace(jobs[0], batches_per_s=3.2), jobs[1]))
        assert refreshed == [cards(app.panel)[0]]

    run_panel(DataLoaderPanel(), script)


def test_narrow_panel_keeps_worker_rows_within_width() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, (jf.data_bound_job(),))
        card = cards(app.panel)[0]
        lines = card.render().plain.splitlines()
        assert max(len(line) for line in lines) <= card.content_size.width
        assert "data wait 62% of step" in "\n".join(lines)

    run_panel(DataLoaderPanel(), script, size=(44, 40))
