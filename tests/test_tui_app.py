"""Pilot tests of the monitor: snapshots in through the source, keys in, screen contents out."""

from __future__ import annotations

import asyncio
import dataclasses
import functools

from tests.snapshot_fixtures import (
    EPOCH,
    TRAINER_PID,
    WORKER_PIDS,
    ScriptedSource,
    feed,
    machine,
    series,
)
from traintop.collectors.snapshot import CollectorError, ProcessSnapshot
from traintop.tui.app import build_app
from traintop.tui.screens.help import HelpScreen
from traintop.tui.widgets.cpu import CpuPanel
from traintop.tui.widgets.gpu import GpuPanel
from traintop.tui.widgets.header import HeaderBar
from traintop.tui.widgets.process_table import ProcessTable
from traintop.tui.widgets.status import StatusLine
from traintop.tui.widgets.verdict import VerdictBanner


def async_test(test):
    """Run an async Pilot test on a fresh event loop (no async pytest plugin is installed)."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


def make(snapshots, **kwargs):
    source = ScriptedSource(snapshots)
    return source, build_app(source, clock=lambda: EPOCH, **kwargs)


def text(app, widget_type) -> str:
    return app.query_one(widget_type).render().plain


@async_test
async def test_a_first_snapshot_is_in_the_first_frame():
    """The monitor hands over a sample taken before start: panels are full before the source
    delivers anything; the verdict runner judges it with the first tick, before that tick's
    (one snapshot spans no time: its verdict could only be "collecting data")."""
    first, second, *_ = series(2, gpus=8)
    source, app = make([], first=first)
    async with app.run_test(size=(200, 50)) as pilot:
        assert text(app, GpuPanel).count("H100 80GB HBM3") == 8
        assert source.started and source.emitted == 0
        assert app.pipeline._runner is None  # nothing judged, the diagnosis not even loaded
        assert "collecting data" in app.query_one(VerdictBanner).lines[0].plain
        await feed(pilot, source, [second])
        assert app.pipeline.runner.runs == 2
        assert "collecting data: 1.0 of 3 s" in app.query_one(VerdictBanner).lines[0].plain


@async_test
async def test_panels_show_the_snapshot():
    ticks = series(3, gpus=8)
    source, app = make(ticks[:1])
    async with app.run_test(size=(200, 50)) as pilot:
        await feed(pilot, source, ticks[1:])
        gpu = text(app, GpuPanel)
        assert source.started
        assert gpu.count("H100 80GB HBM3") == 8
        assert "84°C" in gpu and "SW Power Cap" in gpu and "HW Slowdown, SW Thermal Slowdown" in gpu
        assert "1410/1980 MHz" in gpu
        assert "32 cpus (16 cores)" in text(app, CpuPanel)
        assert "gpu-node-07" in text(app, HeaderBar)
        assert app.query_one("#gpu").border_title == "1 GPU"
        assert len(app.query_one(GpuPanel).history(0)) == 3


def _pids(table) -> list[int]:
    return [row.proc.pid for row in table.rows]


def _without_last_process(snapshot):
    fields = {f: getattr(snapshot, f) for f in snapshot.__slots__}
    return snapshot.__class__(**{**fields, "processes": snapshot.processes[:-1]})


@async_test
async def test_process_table_groups_workers_under_trainer_and_updates_in_place():
    source, app = make([machine(gpus=1, tick=0)])
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        table = app.query_one(ProcessTable)
        pids = _pids(table)
        trainer = pids.index(TRAINER_PID)
        assert pids[trainer + 1 : trainer + 5] == sorted(
            WORKER_PIDS,
            key=lambda pid: -next(r.proc.cpu_pct for r in table.rows if r.proc.pid == pid),
        )
        worker_line = next(line.plain for line in table.lines if " 4301 " in line.plain)
        assert "─ python train.py --config" in worker_line
        before = table.lines[1 + trainer].plain
        next_tick = machine(gpus=1, tick=1)
        source.push(_without_last_process(next_tick))
        await pilot.pause()
        assert table.lines[1 + trainer].plain != before
        assert len(table.rows) == len(next_tick.processes) - 1
        assert 880 not in _pids(table)


@async_test
async def test_process_table_sort_key_and_selection_follow_the_pid():
    source, app = make([machine(gpus=8, tick=0)])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(ProcessTable)
        assert "CPU%▼" in table.lines[0].plain
        await pilot.press("down", "down")
        chosen = table.selected_pid
        await pilot.press("s")
        assert "WAIT%▼" in table.lines[0].plain and table.selected_pid == chosen
        await pilot.press("s")
        assert "RSS▼" in table.lines[0].plain and table.selected_pid == chosen
        rss = [row.proc.rss_bytes for row in table.rows if not row.prefix]
        assert rss == sorted(rss, reverse=True)
        source.push(machine(gpus=8, tick=5))
        await pilot.pause()
        assert table.selected_pid == chosen
        await pilot.press("s", "s")  # GPU memory, then the GPU-holding processes' SM share
        assert "SM%▼" in table.lines[0].plain and table.selected_pid == chosen
        await pilot.press("s", "s")
        assert "PID▲" in table.lines[0].plain
        await pilot.press("end")
        assert table.selected_pid == table.rows[-1].proc.pid
        await pilot.press("home")
        assert table.selected_pid == table.rows[0].proc.pid


@async_test
async def test_kernel_threads_hidden_until_k():
    snapshot = machine(gpus=1)
    kthread = ProcessSnapshot(77, 2, "root", "kworker/0:1", "[kworker/0:1]", 0.0, 0, None, None)
    fields = {f: getattr(snapshot, f) for f in snapshot.__slots__}
    _, app = make([snapshot.__class__(**{**fields, "processes": (*snapshot.processes, kthread)})])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(ProcessTable)
        assert 77 not in _pids(table)
        assert "1 kernel threads hidden (K)" in table.border_subtitle
        await pilot.press("K")
        assert 77 in _pids(table)
        await pilot.press("question_mark")
        assert "Kthreads" in app.screen.query_one("#help-keys").render().plain


@async_test
async def test_process_table_at_80_columns_drops_io_and_keeps_the_command():
    _, app = make([machine(gpus=8)])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.query_one(ProcessTable)
        head = table.lines[0].plain
        assert "READ/s" not in head and "GPU MEM" in head and "COMMAND" in head
        assert all(len(line.plain) <= table.content_size.width for line in table.lines)


@async_test
async def test_number_keys_toggle_panels():
    _, app = make([machine(gpus=1)])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("1", "4")
        assert not app.query_one("#gpu").display
        assert not app.query_one("#disk").display
        assert app.query_one("#cpu").display
        await pilot.press("1")
        assert app.query_one("#gpu").display


@async_test
async def test_pause_freezes_display_while_history_goes_on():
    source, app = make([machine(gpus=1, tick=0)])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("p")
        frozen = text(app, GpuPanel)
        source.push(machine(gpus=1, tick=3))
        await pilot.pause()
        assert text(app, GpuPanel) == frozen
        assert "PAUSED" in text(app, HeaderBar)
        assert len(app.query_one(GpuPanel).history(0)) == 2
        await pilot.press("p")
        assert text(app, GpuPanel) != frozen
        assert "PAUSED" not in text(app, HeaderBar)


@async_test
async def test_plus_minus_change_the_source_interval():
    source, app = make([machine(gpus=0)])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("plus")
        assert source.interval_s == 2.0
        assert "every 2s" in text(app, HeaderBar)
        await pilot.press("minus", "minus", "minus", "minus")
        assert source.interval_s == 0.25


@async_test
async def test_help_opens_and_escape_closes():
    _, app = make([machine(gpus=0)])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = app.screen.query_one("#help-keys").render().plain
        assert "Pause" in keys and "Slower" in keys and "GPU" in keys
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


@async_test
async def test_q_quits_and_stops_the_source():
    source, app = make([machine(gpus=0)])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert source.stopped
    assert app.return_code == 0


@async_test
async def test_tiny_terminal_shows_a_message():
    _, app = make([machine(gpus=8)])
    async with app.run_test(size=(50, 12)) as pilot:
        await pilot.pause()
        assert app.query_one("#too-small").display
        assert app.screen.has_class("-tiny")
        assert "too small" in app.query_one("#too-small-message").render().plain


@async_test
async def test_lost_gpu_row_and_status():
    _, app = make([machine(gpus=8, lost=[3])])
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        rows = text(app, GpuPanel).splitlines()
        assert rows[3].split()[0] == "3" and " LOST GPU is lost" in rows[3]
        assert "gpu 3: lost (GPU is lost)" in text(app, StatusLine)


@async_test
async def test_nvml_unavailable_is_explained():
    _, app = make([machine(nvml=False)])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert text(app, GpuPanel) == "NVML unavailable: NVML library not found"
        assert "gpu: NVML library not found" in text(app, StatusLine)


@async_test
async def test_no_gpu_is_one_line():
    _, app = make([machine(gpus=0)])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert text(app, GpuPanel) == "no NVIDIA GPU found (driver 590.48.01)"


@async_test
async def test_status_line_counts_the_boxs_processes_not_the_rows_kept():
    """412 processes on the box, 20-odd rows kept: htop's Tasks says 412, and so does this.
    A recording made before the count was kept says nothing rather than the rows."""
    counted = dataclasses.replace(machine(gpus=1), process_total=412)
    source, app = make([counted])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert "1 GPU · 412 processes" in text(app, StatusLine)
        assert len(app.snapshot.processes) < 412
        source.push(dataclasses.replace(machine(gpus=1, tick=1), process_total=None))
        await pilot.pause()
        assert text(app, StatusLine).endswith("1 GPU")


@async_test
async def test_collector_error_in_status_line():
    error = CollectorError("disks", "/proc/diskstats: permission denied")
    _, app = make([machine(gpus=1, errors=[error])])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert "disks: /proc/diskstats: permission denied" in text(app, StatusLine)


@async_test
async def test_sixteen_gpus_use_two_columns_on_wide_terminals():
    _, app = make([machine(gpus=16)])
    async with app.run_test(size=(250, 70)) as pilot:
        await pilot.pause()
        rows = text(app, GpuPanel).splitlines()
        assert len(rows) == 8
        assert all(len(row) <= app.query_one(GpuPanel).content_size.width for row in rows)


@async_test
async def test_256_cores_stay_within_the_panel():
    _, app = make([machine(gpus=1, cores=256)])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        panel = app.query_one(CpuPanel)
        lines = text(app, CpuPanel).splitlines()
        assert all(len(line) <= panel.content_size.width for line in lines)
        assert len(lines) <= 10
