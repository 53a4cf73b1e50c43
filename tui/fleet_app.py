"""`traintop fleet`: every node of a job and its ranks, read from Prometheus, in one screen.

The same shape as the live monitor: a source thread delivers immutable snapshots as a
replaceable message, the UI applies each in one ``batch_update()``, ``p`` pauses the display
while refreshing goes on, ``+``/``-`` change the refresh interval and ``q`` quits.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Footer, Static

from traintop.collectors.processes import printable
from traintop.fleet.model import FleetSnapshot
from traintop.fleet.source import FleetSource
from traintop.tui.fleet_rows import (
    GPU_COLUMNS,
    NODE_COLUMNS,
    RANK_COLUMNS,
    gpu_row,
    header_text,
    node_row,
    plain,
    rank_rows,
    verdict_lines,
)
from traintop.tui.screens.help import HelpScreen
from traintop.views.source import next_interval

_STYLES = Path(__file__).parent / "styles"
TONES = ("ok", "info", "warning", "error", "unknown")
NAVIGATION = "↑↓ PgUp PgDn Home End: move in the focused table; Tab moves between nodes and ranks"


class FleetReady(Message):
    """A refresh from the source thread; a newer one replaces it if still queued."""

    def __init__(self, snapshot: FleetSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FleetReady)


class FleetApp(App[None]):
    """Nodes and ranks of one training job across the fleet, with the job's verdict."""

    TITLE = "traintop fleet"
    # app.tcss for what the fleet shares with the monitor (screen, help screen).
    # narrower than Textual's own (mutable) type for these: CONTRIBUTING.md, Types
    CSS_PATH: ClassVar[list[Path]] = [_STYLES / "app.tcss", _STYLES / "fleet.tcss"]  # pyright: ignore[reportIncompatibleVariableOverride]
    VERTICAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [(0, "-short"), (36, "-tall")]  # pyright: ignore[reportIncompatibleVariableOverride]
    BINDINGS: ClassVar[list[Binding]] = [  # pyright: ignore[reportIncompatibleVariableOverride]
        Binding("q", "quit", "Quit"),
        Binding("p", "toggle_pause", "Pause"),
        Binding("plus", "change_interval(1)", "Slower", key_display="+"),
        Binding("minus", "change_interval(-1)", "Faster", key_display="-"),
        Binding("j", "next_job", "Next job"),
        Binding("question_mark", "help", "Help", key_display="?"),
    ]

    def __init__(self, source: FleetSource, *, first: FleetSnapshot | None = None) -> None:
        super().__init__()
        self.source = source
        self.latest: FleetSnapshot | None = first
        self._shown: FleetSnapshot | None = None  # what the tables show (paused: older)
        self.paused = False

    def compose(self) -> ComposeResult:
        yield Static(header_text(None, self.source.interval_s, False), id="fleet-header")
        yield Static("", id="fleet-verdict", classes="-unknown")
        nodes = DataTable(id="nodes", classes="fleet-table", cursor_type="row", zebra_stripes=True)
        nodes.border_title = "Nodes"
        yield nodes
        gpus = DataTable(id="gpus", classes="fleet-table", cursor_type="row", zebra_stripes=True)
        gpus.border_title = "GPUs"
        yield gpus
        ranks = DataTable(id="ranks", classes="fleet-table", cursor_type="row", zebra_stripes=True)
        ranks.border_title = "Ranks"
        yield ranks
        yield Static("connecting…", id="fleet-status")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#nodes", DataTable).add_columns(*NODE_COLUMNS)
        self.query_one("#ranks", DataTable).add_columns(*RANK_COLUMNS)
        self.query_one("#gpus", DataTable).add_columns(*GPU_COLUMNS)
        if self.latest is not None:  # the refresh taken before start: a full first frame
            self.show(self.latest)
        self.source.start(lambda snap: self.post_message(FleetReady(snap)))

    def on_unmount(self) -> None:
        self.source.stop()

    def on_fleet_ready(self, message: FleetReady) -> None:
        self.latest = message.snapshot
        if not self.paused:
            with self.batch_update():
                self.show(message.snapshot)

    def show(self, snap: FleetSnapshot) -> None:
        """Draw one snapshot: header, verdict, the tables, status line."""
        self._shown = snap
        self._show_header()
        self._show_verdict(snap)
        self._fill("#nodes", [node_row(n) for n in snap.nodes])
        self._show_gpus()
        self._fill("#ranks", rank_rows(snap.ranks))
        self._show_status(snap)

    def _show_gpus(self) -> None:
        """The GPUs of the node under the nodes table's cursor."""
        nodes = self._shown.nodes if self._shown is not None else ()
        row = self.query_one("#nodes", DataTable).cursor_row
        node = nodes[row] if 0 <= row < len(nodes) else None
        table = self.query_one("#gpus", DataTable)
        table.border_title = f"GPUs on {printable(node.hostname)}" if node else "GPUs"
        self._fill("#gpus", [gpu_row(g) for g in node.gpus] if node else [])

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "nodes":
            self._show_gpus()

    def _show_header(self) -> None:
        text = header_text(self.latest, self.source.interval_s, self.paused)
        self.query_one("#fleet-header", Static).update(plain(text))

    def _show_verdict(self, snap: FleetSnapshot) -> None:
        tone, head, facts = verdict_lines(snap)
        banner = self.query_one("#fleet-verdict", Static)
        lines = [plain(line) for line in (head, *(f"  · {fact}" for fact in facts))]
        banner.update(Text("\n").join(lines))
        for name in TONES:
            banner.set_class(name == tone, f"-{name}")

    def _fill(self, selector: str, rows: list[tuple]) -> None:
        """Replace the rows, keeping the cursor row and the scroll position a person chose."""
        table = self.query_one(selector, DataTable)
        row, scroll = table.cursor_row, table.scroll_y
        table.clear()
        table.add_rows(rows)
        if rows:
            table.move_cursor(row=min(row, len(rows) - 1), scroll=False)
        table.scroll_to(y=scroll, animate=False, immediate=True)

    def _show_status(self, snap: FleetSnapshot) -> None:
        status = self.query_one("#fleet-status", Static)
        stale = sum(1 for n in snap.nodes if n.stale)
        text = snap.error or (f"{stale} stale node(s)" if stale else "all nodes answering")
        status.update(plain(text))
        status.set_class(snap.error is not None, "-error")

    def action_toggle_pause(self) -> None:
        """Freeze the display; queries go on and the newest result shows on resume."""
        self.paused = not self.paused
        if not self.paused and self.latest is not None:
            self.show(self.latest)
        self._show_header()

    def action_change_interval(self, step: int) -> None:
        self.source.interval_s = next_interval(self.source.interval_s, step)
        self._show_header()

    def action_next_job(self) -> None:
        """Show the next job Prometheus knows, in the header's order."""
        jobs = self.latest.jobs if self.latest is not None else ()
        if not jobs:
            return
        current = self.latest.job.job_id if self.latest and self.latest.job else None
        ids = [j.job_id for j in jobs]
        nxt = ids[(ids.index(current) + 1) % len(ids)] if current in ids else ids[0]
        self.source.select(nxt)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(list(self.BINDINGS), NAVIGATION))
