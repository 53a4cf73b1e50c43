"""What a tick repaints: a subtitle change sends its border row, nothing else.

Over SSH the bytes a tick writes are what the user pays for; a widget that repaints whole
when one word of its border changed resends every row it holds.  These tests capture the
partial updates Textual hands the terminal and check which rows and cells they cover.
"""

from __future__ import annotations

import asyncio

from textual._compositor import ChopsUpdate
from textual.app import App, ComposeResult

from traintop.collectors.snapshot import ProcessSnapshot
from traintop.tui.widgets.process_table import ProcessTable


def proc(pid: int, ppid: int = 1, cmd: str = "python train.py") -> ProcessSnapshot:
    return ProcessSnapshot(pid, ppid, "alice", cmd.split()[0], cmd, 1.0, 1 << 20, 0.0, 0.0)


class TableApp(App):
    CSS = "ProcessTable { border: round red; height: 8; }"

    def compose(self) -> ComposeResult:
        yield ProcessTable(id="processes")


def _capture(app: App) -> list[ChopsUpdate]:
    """Record every partial update the app hands its driver from now on."""
    updates: list[ChopsUpdate] = []
    display = app._display

    def spy(screen, renderable) -> None:
        if isinstance(renderable, ChopsUpdate):
            updates.append(renderable)
        display(screen, renderable)

    app._display = spy
    return updates


def test_a_new_subtitle_repaints_the_bottom_border_row_only():
    asyncio.run(_subtitle_change())


async def _subtitle_change() -> None:
    app = TableApp()
    rows = [proc(10), proc(11), proc(12)]
    async with app.run_test(size=(100, 12)) as pilot:
        table = app.query_one(ProcessTable)
        table.show_processes(rows)
        await pilot.pause()
        updates = _capture(app)
        # A kernel thread more: the table's rows stay, its subtitle counts one more hidden.
        table.show_processes([*rows, proc(30, ppid=2, cmd="[kworker/0:1]")])
        await pilot.pause()
        assert "1 kernel threads hidden" in table.border_subtitle
        bottom = table.region.bottom - 1
        spans = [span for update in updates for span in update.spans]
        assert {y for y, _, _ in spans} == {bottom}
        row = app.screen._compositor.render_strips()[bottom].text
        label = row.index("sort ")
        assert "1 kernel threads hidden" in row[label:]
        # The label's cells, right-aligned against the corner; not the rule left of it.
        assert min(x1 for _, x1, _ in spans) <= label and max(x2 for *_, x2 in spans) == 100
        assert min(x1 for _, x1, _ in spans) > 0
