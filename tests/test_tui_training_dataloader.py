"""The DataLoader panel: the focused job's loading, a row per rank or per worker."""

from __future__ import annotations

from dataclasses import replace

from tests import job_fixtures as jf
from tests import snapshot_fixtures as sf
from tests.test_tui_training import PanelApp, groups, run_panel, text
from traintop.tui.widgets.dataloader import ENDED, NO_WORKERS, DataLoaderPanel
from traintop.tui.widgets.loader_table import loader_rows


async def show(app: PanelApp, jobs, processes=()) -> None:
    app.panel.show_group(groups(tuple(jobs))[0], processes)
    await app.pilot.pause()


def test_single_rank_job_lists_its_workers_under_it() -> None:
    async def script(app: PanelApp) -> None:
        await show(app, (jf.data_bound_job(),))
        lines = text(app.panel).splitlines()
        assert lines[0].split()[:4] == ["RANK", "PID", "WORKERS", "BATCH/S"]
        rank = lines[1].split()
        assert rank[:4] == ["0", "4242", "4", "3.10"] and "62%" in rank
        workers = [ln.split()[:2] for ln in lines[2:]]
        assert workers == [["├─", "4243"], ["├─", "4244"], ["├─", "4245"], ["└─", "4246"]]
        assert "98%" in lines[2] and "45.0 MB/s" in lines[2]
        assert app.panel.border_title == "8 DataLoader"
        assert app.panel.border_subtitle == "resnet50-imagenet"

    run_panel(DataLoaderPanel(), script)


def test_multi_rank_job_is_a_row_per_rank_with_workers_folded() -> None:
    async def script(app: PanelApp) -> None:
        await show(app, sf.ddp_job(8))
        lines = text(app.panel).splitlines()
        assert [ln.split()[0] for ln in lines[1:]] == [str(r) for r in range(8)]
        assert lines[1].split()[2] == "4"  # rank 0's four workers in one row
        assert "WAIT%" not in lines[0]  # no run-queue figures in these processes

    run_panel(DataLoaderPanel(), script)


def test_run_queue_wait_column_appears_with_the_figure() -> None:
    job = jf.data_bound_job()
    procs = sf.processes(8)
    waits = {p.pid: 30.0 + i for i, p in enumerate(procs)}
    with_wait = [replace(p, cpu_wait_pct=waits[p.pid]) for p in procs]
    by_pid = {p.pid: p for p in with_wait}
    worker = replace(job.workers[0], pid=sf.WORKER_PIDS[0])
    job = replace(job, workers=(worker,))
    assert loader_rows((job,), by_pid)[1].wait_pct == by_pid[worker.pid].cpu_wait_pct

    async def script(app: PanelApp) -> None:
        await show(app, (job,), with_wait)
        lines = text(app.panel).splitlines()
        assert "WAIT%" in lines[0]
        assert f"{by_pid[worker.pid].cpu_wait_pct:.0f}%" in lines[2]

    run_panel(DataLoaderPanel(), script)


def test_job_without_workers_and_ended_job_say_why() -> None:
    async def script(app: PanelApp) -> None:
        await show(app, (jf.no_worker_job(),))
        assert text(app.panel).splitlines()[-1] == NO_WORKERS
        await show(app, (jf.crashed_job(),))
        assert text(app.panel).splitlines()[-1] == ENDED

    run_panel(DataLoaderPanel(), script)


def test_many_ranks_scroll_with_the_cursor() -> None:
    async def script(app: PanelApp) -> None:
        await show(app, sf.ddp_job(64))
        lines = text(app.panel).splitlines()
        assert len(lines) == app.panel.content_size.height and "▼" in lines[0]
        app.panel.focus()
        await app.pilot.press("end")
        lines = text(app.panel).splitlines()
        assert lines[-1].split()[0] == "63" and "▲" in lines[0]

    run_panel(DataLoaderPanel(), script, size=(100, 12))
