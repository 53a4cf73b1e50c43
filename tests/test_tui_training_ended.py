"""An ended job's row in the Training panel: static but for its ages, which move in coarse steps.

The collector reports an ended rank every tick with its last-step age grown by the interval;
nothing else about it changes.  The panel must not regroup and redraw a sweep of ended runs
each second for that, and their rows repaint only when the coarse age they show changes.
"""

from __future__ import annotations

from dataclasses import replace

from textual.geometry import Region

from tests import snapshot_fixtures as sf
from tests.test_tui_training import PanelApp, feed, run_panel, text
from traintop.tui.widgets.training import TrainingPanel
from traintop.views.job_groups import same_but_clock


def _ended(ended_s: float, index: int = 0, state: str = "finished"):
    """Run ``index`` of a sweep, ended ``ended_s`` ago (run 0 started 10 min ago)."""
    return replace(sf.sweep_run(index, state=state), last_step_age_s=ended_s)


def test_an_ended_rank_whose_age_grew_says_nothing_new():
    before = (_ended(12.0), *sf.ddp_job(2))
    assert same_but_clock((_ended(13.0), *sf.ddp_job(2)), before)
    assert not same_but_clock((_ended(13.0, state="crashed"), *sf.ddp_job(2)), before)
    assert not same_but_clock((replace(_ended(12.0), steps_total=1), *sf.ddp_job(2)), before)
    live = sf.ddp_job(2)
    assert not same_but_clock((_ended(12.0), replace(live[0], last_step_age_s=9.0), live[1]),
                              before)  # fmt: skip
    assert not same_but_clock(before[:2], before) and not same_but_clock(before, None)


def test_an_ended_jobs_row_repaints_when_its_coarse_age_changes(monkeypatch) -> None:
    painted: list[int] = []

    async def script(app: PanelApp) -> None:
        await feed(app, (_ended(12.0),))
        version = app.panel._version
        original = type(app.panel).refresh

        def counting(self, *regions, **kwargs):
            painted.extend(r.y for r in regions if isinstance(r, Region))
            return original(self, *regions, **kwargs)

        monkeypatch.setattr(type(app.panel), "refresh", counting)
        for tick in range(1, 21):  # ended 13 s ... 32 s ago
            await feed(app, (_ended(12.0 + tick),), tick=tick)
        assert app.panel._version == version  # never regrouped: only the clock moved
        assert "30 s ago" in text(app.panel).splitlines()[1]

    run_panel(TrainingPanel(), script)
    assert painted == [1, 1]  # at 20 s and at 30 s, not every second
