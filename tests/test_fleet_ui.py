"""The fleet view in Textual: what it shows for a throttled two-node job, errors, pause, keys;
and an SVG snapshot of its layout (accept changes with ``pytest --snapshot-update``)."""

from __future__ import annotations

import time
from dataclasses import replace

from textual.widgets import DataTable, Static

from tests.fleet_fixtures import OLD_END, beside_ended, fleet, two_exporters
from tests.test_tui_app import async_test
from traintop.tui.fleet_app import FleetApp, FleetReady
from traintop.tui.screens.help import HelpScreen


class ScriptedFleet:
    """Stands in for FleetSource: the test delivers snapshots; keys are recorded."""

    def __init__(self) -> None:
        self.interval_s = 5.0
        self.selected: list[str | None] = []
        self.running = False

    def start(self, on_snapshot) -> None:
        self.running = True

    def stop(self) -> None:
        self.running = False

    def select(self, wanted: str | None) -> None:
        self.selected.append(wanted)


def _text(app: FleetApp, selector: str) -> str:
    return str(app.query_one(selector, Static).render())


def _cells(app: FleetApp, selector: str) -> list[list[str]]:
    table = app.query_one(selector, DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


@async_test
async def test_shows_nodes_ranks_and_names_the_throttled_node():
    source = ScriptedFleet()
    app = FleetApp(source, first=fleet(two_exporters()))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert source.running
        banner = _text(app, "#fleet-verdict")
        assert banner.startswith("◆ THERMAL THROTTLING — node-b: GPU 2 thermally throttled")
        assert app.query_one("#fleet-verdict").has_class("-error")
        nodes = _cells(app, "#nodes")
        assert [row[0] for row in nodes] == ["node-a", "node-b"]
        assert nodes[1][1:6] == ["ok", "4", "4", "1", "1"]  # state, GPUs, busy, hot, throttled
        assert nodes[1][7] == "4,5,6,7"
        ranks = _cells(app, "#ranks")
        assert len(ranks) == 8 and ranks[6][1] == "node-b" and ranks[6][-1] == "◀ straggler"
        assert "job llama-7b (run:tcp://10.0.0.7:29500/8) · 2 nodes · 8 ranks" in _text(
            app, "#fleet-header"
        )
    assert not source.running


@async_test
async def test_errors_show_in_the_status_line_and_the_data_stays():
    source = ScriptedFleet()
    first = fleet(two_exporters())
    app = FleetApp(source, first=first)
    async with app.run_test(size=(120, 30)) as pilot:
        app.post_message(FleetReady(replace(first, error="cannot reach Prometheus at x: refused")))
        await pilot.pause()
        assert _text(app, "#fleet-status") == "cannot reach Prometheus at x: refused"
        assert app.query_one("#fleet-status").has_class("-error")
        assert len(_cells(app, "#nodes")) == 2


@async_test
async def test_stale_node_and_pause_resume():
    source = ScriptedFleet()
    nodes = two_exporters()
    first = fleet(nodes)
    stale = fleet(nodes, down=("10.0.0.2:19400",), previous=first)
    app = FleetApp(source, first=first)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("p")
        app.post_message(FleetReady(stale))
        await pilot.pause()
        assert _cells(app, "#nodes")[1][1] == "ok" and "PAUSED" in _text(app, "#fleet-header")
        await pilot.press("p")
        assert _cells(app, "#nodes")[1][1].startswith("STALE")
        assert _text(app, "#fleet-status") == "1 stale node(s)"


@async_test
async def test_refresh_keeps_the_cursor_row():
    source = ScriptedFleet()
    first = fleet(two_exporters())
    app = FleetApp(source, first=first)
    async with app.run_test(size=(120, 30)) as pilot:
        app.query_one("#ranks", DataTable).focus()
        await pilot.press("down", "down", "down")
        app.post_message(FleetReady(first))
        await pilot.pause()
        assert app.query_one("#ranks", DataTable).cursor_row == 3


@async_test
async def test_keys_change_interval_and_job():
    source = ScriptedFleet()
    app = FleetApp(source, first=fleet(two_exporters()))
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("plus")
        assert source.interval_s == 10.0 and "every 10 s" in _text(app, "#fleet-header")
        await pilot.press("j")
        assert source.selected == ["run:tcp://10.0.0.7:29500/8"]  # the only job: stays on it
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "Next job" in str(app.screen.query_one("#help-keys", Static).render())
        assert "nodes and ranks" in str(app.screen.query_one("#help-navigation", Static).render())


def test_fleet_screen_layout(snap_compare):
    app = FleetApp(ScriptedFleet(), first=fleet(two_exporters()))
    assert snap_compare(app, terminal_size=(120, 40))


@async_test
async def test_labels_are_shown_as_text_never_as_markup_or_escapes():
    """Any user names their job and host: "[/b]" must not break the screen, an escape sequence
    must reach the terminal as "?"."""
    snap = fleet(two_exporters())
    evil = "evil[/b]\x1b[2J"
    nodes = tuple(replace(n, hostname=evil) if n.hostname == "node-b" else n for n in snap.nodes)
    ranks = tuple(replace(r, hostname=evil) if r.hostname == "node-b" else r for r in snap.ranks)
    job = replace(snap.job, name="[bold]job\x07")
    app = FleetApp(ScriptedFleet(), first=replace(snap, nodes=nodes, ranks=ranks, job=job))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert _cells(app, "#nodes")[1][0] == "evil[/b]?[2J"
        assert _cells(app, "#ranks")[4][1] == "evil[/b]?[2J"
        assert "job [bold]job? (" in _text(app, "#fleet-header")


@async_test
async def test_gpus_of_the_node_under_the_cursor():
    app = FleetApp(ScriptedFleet(), first=fleet(two_exporters()))
    async with app.run_test(size=(160, 50)) as pilot:
        assert app.query_one("#gpus", DataTable).border_title == "GPUs on node-a"
        assert all(row[-1] == "-" for row in _cells(app, "#gpus"))
        app.query_one("#nodes", DataTable).focus()
        await pilot.press("down")
        assert app.query_one("#gpus", DataTable).border_title == "GPUs on node-b"
        gpu2 = _cells(app, "#gpus")[2]
        assert gpu2[:4] == ["2", "71%", "84 °C", "89 °C"]
        assert gpu2[6:] == ["1410", "1980", "HW Slowdown + SW Thermal Slowdown"]


@async_test
async def test_at_80x24_the_ranks_keep_their_room():
    app = FleetApp(ScriptedFleet(), first=fleet(two_exporters()))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert not app.query_one("#gpus").display
        assert app.query_one("#ranks").size.height >= 8
        assert app.query_one("#fleet-status").region.y == 22  # nothing pushed off screen


@async_test
async def test_an_ended_job_reads_ended_with_its_end_and_dashes_for_rates():
    snap = fleet(beside_ended(), wanted="old")
    app = FleetApp(ScriptedFleet(), first=snap)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        header = _text(app, "#fleet-header")
        end = time.strftime("%H:%M", time.localtime(OLD_END))
        assert f"job old (run:tcp://10.0.0.7:29600/3) · ENDED {end} · 1 live job, 1 ended" in header
        banner = _text(app, "#fleet-verdict")
        assert banner.startswith(f"◇ ENDED {end} (crashed, 5 min ago) — last verdict ")
        assert app.query_one("#fleet-verdict").has_class("-error")
        ranks = _cells(app, "#ranks")
        assert [row[3:10] for row in ranks] == [["crashed", *["—"] * 6]] * 3


@async_test
async def test_the_header_counts_running_and_ended_jobs_apart():
    app = FleetApp(ScriptedFleet(), first=fleet(beside_ended()))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        header = _text(app, "#fleet-header")
        assert "job llama-7b (run:tcp://10.0.0.7:29500/2) · 1 live job, 1 ended (j: next)" in header
        assert "ENDED" not in header and "ENDED" not in _text(app, "#fleet-verdict")
