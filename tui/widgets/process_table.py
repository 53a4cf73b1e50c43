"""The process table widget (key 6): htop's list, drawn line by line through the Line API.

DataTable repaints every visible row whenever any cell changes, and CPU% changes every tick, so
it cost about half of the monitor's CPU.  This table keeps one ``Content`` per screen line and
repaints only the lines whose text changed; an idle process costs nothing.  It always draws
exactly as many lines as it is tall, so a process starting or exiting never triggers a layout.
The selection follows its pid across ticks and re-sorts, at the same place on screen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.geometry import Size
from textual.strip import Strip

from traintop.collectors.snapshot import ProcessSnapshot
from traintop.tui.widgets.panel import LineWidget, set_border_subtitle
from traintop.tui.widgets.processes import (
    SORT_ORDER,
    Column,
    Row,
    display_rows,
    header,
    is_kernel_thread,
    plan_columns,
    row_content,
)

_SORT_NAMES = {
    "cpu": "CPU%",
    "wait": "WAIT%",
    "mem": "RSS",
    "gpu": "GPU MEM",
    "sm": "SM%",
    "io": "I/O",
    "pid": "PID",
}
_WHEEL_LINES = 3


class ProcessTable(LineWidget, can_focus=True):
    """Processes sorted by a chosen column, each trainer followed by its DataLoader workers."""

    KEY = "6"
    TITLE = "Processes"
    MOVING_FROM = 1  # the column header stays
    # narrower than Textual's own (mutable) type for it: CONTRIBUTING.md, Types
    BINDINGS: ClassVar[list[Binding]] = [  # pyright: ignore[reportIncompatibleVariableOverride]
        Binding("s", "cycle_sort", "Sort"),
        Binding("K", "toggle_kernel", "Kthreads", key_display="K"),
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move(-1000000)", "First", show=False),
        Binding("end", "move(1000000)", "Last", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="panel")
        self.border_title = f"{self.KEY} {self.TITLE}"
        self.sort = SORT_ORDER[0]
        self.show_kernel = False
        self._processes: Sequence[ProcessSnapshot] = ()
        self._rows: list[Row] = []
        self._cursor = 0
        self._top = 0
        self._selected_pid: int | None = None  # None: the cursor stays on the first row
        self._built_size = Size(0, 0)
        self._layout: tuple[tuple[Column, ...], int] = ((), 0)  # columns and width drawn at
        self._drawn: dict[int, tuple] = {}  # pid -> (process row, prefix, selected, line)

    @property
    def rows(self) -> list[Row]:
        """Every row in display order, including those scrolled out of view."""
        return list(self._rows)

    @property
    def selected_pid(self) -> int | None:
        """The pid under the cursor, or None while the table is empty."""
        return self._rows[self._cursor].proc.pid if self._rows else None

    def show_processes(self, processes: Sequence[ProcessSnapshot]) -> None:
        """Bring the table to ``processes``, keeping the selected pid where it was on screen."""
        self._processes = processes
        self._redraw()

    def _redraw(self) -> None:
        offset = self._cursor - self._top
        self._rows = display_rows(self._processes, self.sort, self.show_kernel)
        pids = [row.proc.pid for row in self._rows]
        if self._selected_pid in pids:
            self._cursor = pids.index(self._selected_pid)
        self._cursor = max(0, min(self._cursor, len(self._rows) - 1))
        if self._selected_pid is not None and pids:
            self._selected_pid = pids[self._cursor]  # an exited process hands over its place
        self._top = self._cursor - offset
        self._clamp_top()
        self.set_lines(self._build_lines(), self._visible_pids())
        self._show_subtitle()

    def _visible(self) -> int:
        return max(1, self.content_size.height - 1)

    def _clamp_top(self) -> None:
        """Keep the cursor on screen and never scroll past the last row."""
        visible = self._visible()
        self._top = min(self._top, self._cursor, max(0, len(self._rows) - visible))
        self._top = max(self._top, self._cursor - visible + 1, 0)

    def render_line(self, y: int) -> Strip:
        if self.content_size != self._built_size:
            # The first paint after a layout comes before the Resize event (see Panel).
            self._clamp_top()
            self._lines, self._strips = self._build_lines(), {}
            self._keys = self._visible_pids()
        return super().render_line(y)

    def _visible_pids(self) -> list[int | None] | None:
        """The pid of each row line on screen (``None``: empty), which moves them on the
        terminal when they change places (views/row_moves.py); ``None`` before a size."""
        width, height = self.content_size
        if height <= 0 or width <= 0:
            return None
        pids: list[int | None] = [row.proc.pid for row in self._rows[self._top :][: height - 1]]
        return pids + [None] * (height - 1 - len(pids))

    def _build_lines(self) -> list[Content]:
        width, height = self.content_size
        if height <= 0 or width <= 0:
            return self._lines
        self._built_size = self.content_size
        columns = plan_columns(width, self._rows)
        if (columns, width) != self._layout:
            self._layout, self._drawn = (columns, width), {}
        drawn, self._drawn = self._drawn, {}
        lines = [header(columns, self.sort, width)]
        for index in range(self._top, self._top + height - 1):
            if index < len(self._rows):
                lines.append(self._row_line(self._rows[index], index == self._cursor, drawn))
            else:
                lines.append(Content(""))
        return lines

    def _row_line(self, row: Row, selected: bool, drawn: dict[int, tuple]) -> Content:
        """``row_content`` of a row, last tick's where the collector handed back the same
        process row (most sleep: it keeps their rows) and nothing else about it changed."""
        last = drawn.get(row.proc.pid)
        if last is not None and last[0] is row.proc and last[1:3] == (row.prefix, selected):
            line = last[3]
        else:
            columns, width = self._layout
            line = row_content(row, columns, width, selected)
        self._drawn[row.proc.pid] = (row.proc, row.prefix, selected, line)
        return line

    def _show_subtitle(self) -> None:
        """Sort column, rows shown and hidden kernel threads, in the bottom border."""
        hidden = 0 if self.show_kernel else sum(map(is_kernel_thread, self._processes))
        parts = [f"sort {_SORT_NAMES[self.sort]} (s)", f"{len(self._rows)} shown"]
        if hidden:
            parts.append(f"{hidden} kernel threads hidden (K)")
        set_border_subtitle(self, " · ".join(parts))

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self._rows) + 1)

    def on_resize(self) -> None:
        if self.content_size != self._built_size:  # not at the size painted (see Panel)
            self._redraw()

    def action_cycle_sort(self) -> None:
        """Next sort column: CPU%, WAIT%, RSS, GPU memory, I/O, PID."""
        self.sort = SORT_ORDER[(SORT_ORDER.index(self.sort) + 1) % len(SORT_ORDER)]
        self._redraw()

    def action_toggle_kernel(self) -> None:
        """Show or hide kernel threads, like htop's K."""
        self.show_kernel = not self.show_kernel
        self._redraw()

    def action_move(self, delta: int) -> None:
        """Move the cursor; from then on the selection follows its process."""
        if not self._rows:
            return
        self._cursor = max(0, min(self._cursor + delta, len(self._rows) - 1))
        self._selected_pid = self._rows[self._cursor].proc.pid
        self._redraw()
        # In attach mode the table sits below the fold: bring it up when the user drives it.
        self.scroll_visible(animate=False)

    def action_page(self, pages: int) -> None:
        self.action_move(pages * self._visible())

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self._scroll(_WHEEL_LINES)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._scroll(-_WHEEL_LINES)

    def _scroll(self, lines: int) -> None:
        self._top = max(0, min(self._top + lines, len(self._rows) - self._visible()))
        self._cursor = max(self._top, min(self._cursor, self._top + self._visible() - 1))
        if self._rows:
            self._selected_pid = self._rows[self._cursor].proc.pid
        self._redraw()

    def on_click(self, event: events.Click) -> None:
        """Select the clicked row (line 0 is the header)."""
        if event.y >= 1 and self._top + event.y - 1 < len(self._rows):
            self.action_move(self._top + event.y - 1 - self._cursor)
