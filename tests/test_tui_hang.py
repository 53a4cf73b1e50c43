"""A hung job on screen (scripted ranks): the jobs table's state cell, the case and the folded
stacks under the focused job, each rank's place, and every rank's stack in the details."""

from __future__ import annotations

from tests import snapshot_fixtures as sf
from tests.test_tui_training import PanelApp, feed, run_panel, text
from traintop.diagnosis.api import diagnose
from traintop.tui.screens.details import stack_items
from traintop.tui.widgets.training import TrainingPanel


def test_the_jobs_table_and_the_focused_job_say_where_each_rank_is() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, sf.hung_job())
        lines = text(app.panel).splitlines()
        assert "▶ llama-7b" in lines[1] and "HUNG 1m12s" in lines[1]
        assert lines[2].startswith("HUNG 1m12s · not entered: rank 2 never reached all_reduce")
        assert "ranks 0-1, 3: all_reduce (distributed_c10d.py) at train.py:120 in train" in lines[3]
        assert "rank 2: _api_call (client.py) at data.py:41 in fetch_shard" in lines[4]
        rows = {ln.split()[0]: ln for ln in lines if ln.split()[:1] in (["0"], ["2"])}
        assert "in all_reduce #1042 for 1m12s" in rows["0"]
        assert "not entered (last #1041)" in rows["2"]

    run_panel(TrainingPanel(), script, size=(200, 30))


def test_a_stalled_job_reads_stalled_in_the_table() -> None:
    async def script(app: PanelApp) -> None:
        await feed(app, sf.hung_job(waited_s=14.0))
        assert "STALLED 14s" in text(app.panel).splitlines()[1]

    run_panel(TrainingPanel(), script)


def test_details_list_every_ranks_whole_stack() -> None:
    verdict = diagnose([sf.machine(gpus=0, jobs=sf.hung_job(), tick=t) for t in (0, 5)])
    items = [str(body) for _, body in stack_items(verdict)]
    heads = [i for i in items if i.startswith("rank ")]
    assert len(heads) == 4 and heads[2].startswith("rank 2 (pid 4244): not entered (last #1041)")
    assert 'File "/home/ana/llama/data.py", line 41, in fetch_shard' in items
    assert "    blob = client.get_object(key)" in items  # its source line, under it
    healthy = diagnose([sf.machine(gpus=0, jobs=sf.ddp_job(4), tick=t) for t in (0, 5)])
    assert stack_items(healthy) == []  # no stopped job: the section is hidden
