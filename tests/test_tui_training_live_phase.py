"""The live phase in the Training panel: where a stalled job hangs, and over-long phases."""

from __future__ import annotations

from dataclasses import replace

from tests import job_fixtures as jf
from tests.test_tui_training import PanelApp, feed, run_panel, texts
from tui.widgets.job_cards import long_live_phase
from tui.widgets.training import TrainingPanel


def test_stalled_job_names_the_phase_it_hangs_in() -> None:
    job = replace(jf.stalled_job(), live_phase="backward", live_phase_s=43.2)

    async def script(app: PanelApp) -> None:
        await feed(app, (job,))
        (text,) = texts(app.panel)
        assert "◐ stalled: in backward for 43 s" in text and "no step for" not in text

    run_panel(TrainingPanel(), script)


def test_live_job_shows_its_phase_only_past_five_p50_steps() -> None:
    live = replace(jf.data_bound_job(), live_phase="data", step_time_p50_s=0.4)
    assert long_live_phase(replace(live, live_phase_s=1.9)) is None
    assert long_live_phase(replace(live, live_phase_s=2.1)) == "in data for 2 s"
    assert long_live_phase(replace(live, live_phase_s=2.1, step_time_p50_s=None)) is None

    async def script(app: PanelApp) -> None:
        await feed(app, (replace(live, live_phase_s=150.0),))
        (text,) = texts(app.panel)
        assert "● live · in data for 2 min" in text

    run_panel(TrainingPanel(), script)


def test_unknown_or_finished_live_phase_falls_back_to_the_step_age() -> None:
    stalled = jf.stalled_job()
    assert long_live_phase(stalled) is None  # no live word read: the old badge stays
    finished = replace(jf.crashed_job(), live_phase="forward", live_phase_s=99.0)
    assert long_live_phase(finished) is None
