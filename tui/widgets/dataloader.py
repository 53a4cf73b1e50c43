"""The DataLoader panel (key 8): the focused job's data loading, one row per rank or worker.

It follows the Training panel's cursor: the app hands it the focused job and the processes of
the same snapshot (for the workers' run-queue wait).  Like the Training panel it is as tall as
its rows up to the stylesheet's cap, builds only the rows on screen, and scrolls with the
arrows when it has focus.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.binding import Binding
from textual.content import Content

from traintop.collectors.snapshot import ProcessSnapshot
from traintop.tui.widgets.fitted import FittedLines
from traintop.tui.widgets.loader_table import LoaderRow, loader_columns, loader_rows, row_cells
from traintop.tui.widgets.table import (
    cursor_bindings,
    header_line,
    marker_room,
    more_marker,
    row_line,
    scroll_top,
)
from traintop.views.job_groups import JobGroup

NO_WORKERS = "no worker processes: batches are loaded in the training process"
NO_JOB = "no job focused"
ENDED = "the job has ended: workers are sampled only while it runs"


class DataLoaderPanel(FittedLines, can_focus=True):
    """Border title "8 DataLoader"; the subtitle names the job it shows."""

    KEY = "8"
    TITLE = "DataLoader"
    # narrower than Textual's own (mutable) type for it: CONTRIBUTING.md, Types
    BINDINGS: ClassVar[list[Binding]] = cursor_bindings("move(-10)", "move(10)")  # pyright: ignore[reportIncompatibleVariableOverride]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="panel")
        self.border_title = f"{self.KEY} {self.TITLE}"
        self._group: JobGroup | None = None
        self._rows: list[LoaderRow] = []
        self._cursor = self._top = 0
        self._rank: int | None = None

    def show_group(
        self, group: JobGroup | None, processes: Sequence[ProcessSnapshot], rank: int | None = None
    ) -> None:
        """Show ``group``'s loading, the row of ``rank`` highlighted (the rank the Training
        panel's cursor is on); unchanged rows cost one comparison."""
        self._follow(group, rank)
        pids = {w.pid for job in group.ranks for w in job.workers} if group else set()
        by_pid = {p.pid: p for p in processes if p.pid in pids} if pids else {}
        rows = loader_rows(group.ranks, by_pid) if group is not None else []
        if rows == self._rows and self._lines:
            return
        self._rows = rows
        self._cursor = min(self._cursor, max(0, len(rows) - 1))
        subtitle = "" if group is None else group.name
        if subtitle != self.border_subtitle:
            self.border_subtitle = subtitle
        self.redraw()

    def _follow(self, group: JobGroup | None, rank: int | None) -> None:
        """Start at the top for another job; put the cursor on ``rank`` when one is given."""
        if group is not None and self._group is not None and group.key != self._group.key:
            self._cursor = self._top = 0
        self._group = group
        if rank != self._rank:
            self._rank = rank
            self._lines = []  # repaint: the highlight moved
        if group is not None and rank is not None:
            self._cursor = next((i for i, j in enumerate(group.ranks) if j.rank == rank), 0)

    def _note(self) -> str | None:
        group = self._group
        if group is None:
            return NO_JOB
        if not group.running:
            return ENDED
        if not any(job.workers for job in group.ranks):
            return NO_WORKERS
        return None

    def natural_height(self, width: int) -> int:
        return 1 + len(self._rows) + (self._note() is not None)

    def build(self, width: int, height: int) -> list[Content]:
        note = self._note()
        if not self._rows:
            return [Content.styled(note or NO_JOB, "$text-muted")]
        shown = max(1, height - 1 - (note is not None))
        self._top = scroll_top(self._cursor, self._top, len(self._rows), shown)
        marker = more_marker(self._top, len(self._rows) - self._top - shown)
        columns = loader_columns(self._rows, width - marker_room(marker))
        lines = [header_line(columns, width, marker)]
        for index in range(self._top, min(self._top + shown, len(self._rows))):
            cursor = (self.has_focus or self._rank is not None) and index == self._cursor
            cells = row_cells(self._rows[index], columns)
            lines.append(row_line(cells, columns, width, cursor))
        if note is not None:
            lines.append(Content.styled(note, "$text-muted"))
        return lines[:height]

    def action_move(self, delta: int) -> None:
        if self._rows:
            self._cursor = max(0, min(self._cursor + delta, len(self._rows) - 1))
            self.redraw()
