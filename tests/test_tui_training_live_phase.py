"""The live phase in the Training panel: where a stalled job hangs, and over-long phases."""

from __future__ import annotations

from dataclasses import replace

from tests import job_fixtures as jf
from tests import snapshot_fixtures as sf
from tests.test_tui_training import PanelApp, feed, run_panel, text
from traintop.tui.widgets.training import TrainingPanel
from traintop.views.job_groups import long_live_phase


def test_stalled_rank_names_the_phase_it_hangs_in() -> None:
    # Rank 1 hangs in backward; the others wait for it in all-reduce: all of them stall, past
    # the job's stall limit (10 s).  No ledger (rings of an older traintop): the phases say it.
    ranks = [replace(job, state="stalled", live_phase="allreduce", live_phase_s=43.0,
                     last_step_age_s=44.0) for job in sf.ddp_job(4)]  # fmt: skip
    ranks[1] = replace(ranks[1], live_phase="backward", live_phase_s=43.2)

    async def script(app: PanelApp) -> None:
        await feed(app, tuple(ranks))
        lines = text(app.panel).splitlines()
        assert "STALLED 44s" in lines[1] and "44 s ago" in lines[1]
        rank_row = next(ln for ln in lines if ln.split()[:1] == ["1"])
        assert rank_row.rstrip().endswith("stalled: in backward for 43 s")

    run_panel(TrainingPanel(), script)


def test_live_job_shows_its_phase_only_past_five_p50_steps() -> None:
    live = replace(jf.data_bound_job(), live_phase="data", step_time_p50_s=0.4)
    assert long_live_phase(replace(live, live_phase_s=1.9)) is None
    assert long_live_phase(replace(live, live_phase_s=2.1)) == "in data for 2 s"
    assert long_live_phase(replace(live, live_phase_s=2.1, step_time_p50_s=None)) is None
    ranks = sf.ddp_job(2)

    async def script(app: PanelApp) -> None:
        slow = replace(ranks[1], live_phase="data", live_phase_s=150.0)
        await feed(app, (ranks[0], slow))
        rank_row = next(ln for ln in text(app.panel).splitlines() if ln.split()[:1] == ["1"])
        assert rank_row.rstrip().endswith("in data for 2 min")

    run_panel(TrainingPanel(), script)


def test_unknown_or_finished_live_phase_falls_back() -> None:
    assert long_live_phase(jf.stalled_job()) is None  # no live word read
    finished = replace(jf.crashed_job(), live_phase="forward", live_phase_s=99.0)
    assert long_live_phase(finished) is None
