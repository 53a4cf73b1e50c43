"""The Training panel (key 7): every job in a table, and the focused job in detail below it.

htop's shape for jobs: one row per job with its ranks folded in, running jobs first in natural
order (sweep2 before sweep10), jobs that ended more than ``ENDED_COLLAPSE_S`` ago folded into
one summary row that ``e`` expands.  The row under the cursor is the focused job: below the
table its phase bar and step-time history, then its rank table.  Arrows move the cursor, Enter
steps into the rank table (arrows then move between ranks and the phase bar shows the rank
under the cursor), Escape steps back.  The panel is as tall as its content up to the cap the
stylesheet sets, and builds only the rows on screen.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import ClassVar

from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.message import Message

from traintop.collectors.snapshot import JobSnapshot, Snapshot
from traintop.tui.widgets.fitted import FittedLines
from traintop.tui.widgets.job_detail import detail_lines, hang_lines, life_lines
from traintop.tui.widgets.jobs_table import (
    ALWAYS_SHOWN,
    clock_cells,
    job_columns,
    job_row,
    shows_history,
    summary_row,
)
from traintop.tui.widgets.rank_table import rank_columns, rank_rows
from traintop.tui.widgets.table import (
    cursor_bindings,
    header_line,
    marker_room,
    more_marker,
    scroll_top,
)
from traintop.views.job_groups import (
    EndedSummary,
    JobGroup,
    job_groups,
    keep_last_numbers,
    mean_step,
    same_but_clock,
    table_rows,
)

HISTORY_LEN = 300  # ticks of step-time p50 kept per job for the sparkline
EMPTY_MESSAGE = (
    "no training job attached — run `traintop run -- python train.py` or use traintop.attach()"
)
Row = JobGroup | EndedSummary


class TrainingPanel(FittedLines, can_focus=True):
    """Border title "7 Training"; keeps a bounded step-time history per job."""

    KEY = "7"
    TITLE = "Training"
    # narrower than Textual's own (mutable) type for it: CONTRIBUTING.md, Types
    BINDINGS: ClassVar[list[Binding]] = [  # pyright: ignore[reportIncompatibleVariableOverride]
        Binding("enter", "enter", "Ranks", key_display="↵"),
        Binding("e", "toggle_ended", "Ended jobs"),
        Binding("escape", "leave_ranks", "Jobs", show=False),
        *cursor_bindings(),
    ]

    class JobFocused(Message):
        """The cursor moved to another job or rank (the DataLoader panel follows it)."""

    def __init__(self, *, focus_pid: int | None = None, id: str | None = None) -> None:
        super().__init__(id=id, classes="panel")
        self.border_title = f"{self.KEY} {self.TITLE}"
        self.focus_pid = focus_pid
        self.expanded = False
        self.in_ranks = False
        self._now = 0.0
        self._jobs: tuple[JobSnapshot, ...] | None = None
        self._rows: list[Row] = []
        self._cursor = self._top = self._rank_cursor = self._rank_top = self._jobs_shown = 0
        self._focus_key: str | None = None
        self._announced: tuple[str | None, int | None] = (None, None)
        self._history: dict[str, deque[float]] = {}
        self._groups: dict[str, JobGroup] = {}
        self._previous: dict[int, JobSnapshot] = {}
        self._version = 0  # counts job changes: with the view state it keys the caches below
        self._detail_cache: tuple[tuple, list[Content]] = ((), [])
        self._built_key: tuple = ()
        self._scrolls = False  # whether the last build could not show every row
        self._mean_cache: tuple[tuple, JobSnapshot | None] = ((), None)

    @property
    def rows(self) -> list[Row]:
        """The table's rows, including those scrolled out of view."""
        return list(self._rows)

    @property
    def selected_rank(self) -> int | None:
        """The rank under the rank table's cursor after Enter, else None."""
        group = self.focused
        return group.ranks[self._rank_cursor].rank if self.in_ranks and group else None

    @property
    def focused(self) -> JobGroup | None:
        """The job under the cursor (None while there is none)."""
        row = self._rows[self._cursor] if self._rows else None
        return row if isinstance(row, JobGroup) else None

    def update_jobs(self, snapshot: Snapshot) -> None:
        """Called once per tick by the app with the newest snapshot."""
        self._now = snapshot.timestamp
        if not same_but_clock(snapshot.jobs, self._jobs):
            self._jobs = snapshot.jobs
            self._version += 1
            self._regroup(snapshot)
        self._place_rows()
        self.redraw()

    def _regroup(self, snapshot: Snapshot) -> None:
        jobs = tuple(keep_last_numbers(j, self._previous.get(j.pid)) for j in snapshot.jobs)
        self._previous = {job.pid: job for job in jobs}
        groups = {g.key: g for g in job_groups(replace(snapshot, jobs=jobs))}
        self._remember(groups)
        self._groups = groups

    def _remember(self, groups: dict[str, JobGroup]) -> None:
        """Append the step-time p50 of each running job; forget ended keys.

        A job whose ranks were carried from an earlier tick (beyond 16 live ranks they are
        summarised in turns: collectors/turns.py) gets its carried p50 again, so every job's
        history keeps one point per tick and reads on the same time scale when focused.
        """
        self._history = {key: h for key, h in self._history.items() if key in groups}
        for key, group in groups.items():
            history = self._history.setdefault(key, deque(maxlen=HISTORY_LEN))
            if group.running and group.step_time_p50_s is not None:
                history.append(group.step_time_p50_s)

    def _place_rows(self) -> None:
        """Rebuild the row list and keep the cursor on the job it was on (that job is not
        folded into the ended-jobs row while the cursor is on it)."""
        wanted = self._focus_key
        if wanted is None and self.focus_pid is not None:
            wanted = next((g.key for g in self._groups.values() if g.has_pid(self.focus_pid)), None)
        groups = list(self._groups.values())
        self._rows = table_rows(groups, self._now, self.expanded, keep=wanted)
        keys = [row.key if isinstance(row, JobGroup) else None for row in self._rows]
        if wanted is not None and wanted in keys:
            self._cursor = keys.index(wanted)
        self._cursor = max(0, min(self._cursor, len(self._rows) - 1))
        self._set_focus_key()

    def _set_focus_key(self) -> None:
        group = self.focused
        key = group.key if group is not None else None
        if key != self._focus_key:
            self._focus_key = key
            self._rank_cursor = self._rank_top = 0
            self.in_ranks = self.in_ranks and group is not None and len(group.ranks) > 1
        if group is not None:
            self._rank_cursor = min(self._rank_cursor, len(group.ranks) - 1)
        if (key, self.selected_rank) != self._announced:
            self._announced = (key, self.selected_rank)
            self.post_message(self.JobFocused())
        subtitle = self._subtitle(group) if group is not None else ""
        if subtitle != self.border_subtitle:  # assigning repaints the border, even unchanged
            self.border_subtitle = subtitle

    def _subtitle(self, group: JobGroup) -> str:
        if len(group.ranks) == 1:
            return group.name
        if self.in_ranks:
            return f"{group.name} · phases of rank {group.ranks[self._rank_cursor].rank}"
        return f"{group.name} · phases: mean of {len(group.ranks)} ranks"

    # Layout -----------------------------------------------------------------------------

    def _detail(self, width: int, scrolls: bool) -> list[Content]:
        group = self.focused
        key = (self._version, width, scrolls, self.in_ranks, self._rank_cursor, self._focus_key)
        if group is None or key == self._detail_cache[0]:
            return self._detail_cache[1] if group is not None else []
        lines = self._build_detail(group, width, scrolls)
        self._detail_cache = (key, lines)
        return lines

    def _build_detail(self, group: JobGroup, width: int, scrolls: bool) -> list[Content]:
        step = group.ranks[self._rank_cursor] if self.in_ranks else self._mean_step(group)
        carried = shows_history(width, scrolls, self._longest())
        history = () if carried else self._history.get(group.key, ())
        lines = detail_lines(step, tuple(history), width)
        hang = hang_lines(group.hang, width) if group.hang else []
        return hang + life_lines(group, width) + lines

    def _mean_step(self, group: JobGroup) -> JobSnapshot:
        """:func:`mean_step` of ``group``, once per change of the jobs."""
        key = (self._version, group.key)
        cached_key, step = self._mean_cache
        if cached_key != key or step is None:
            step = mean_step(group.ranks)
            self._mean_cache = (key, step)
        return step

    def _rank_count(self) -> int:
        group = self.focused
        return len(group.ranks) if group is not None and len(group.ranks) > 1 else 0

    def natural_height(self, width: int) -> int:
        if not self._rows:
            return 1
        ranks = self._rank_count()
        return 1 + len(self._rows) + len(self._detail(width, False)) + (ranks + 1 if ranks else 0)

    def _view_key(self, width: int, height: int) -> tuple:
        """Everything the lines depend on: equal keys draw equal lines, so an unchanged tick
        with 64 ranks costs this tuple, not 64 rows (the ages are the clock's only part)."""
        ages = tuple(clock_cells(row, self._now) for row in self._rows if isinstance(row, JobGroup))
        cursors = (self._cursor, self._top, self._rank_cursor, self._rank_top, self.in_ranks)
        rows = tuple(row.key if isinstance(row, JobGroup) else row for row in self._rows)
        return (self._version, width, height, rows, *cursors, self.has_focus, ages)

    def build(self, width: int, height: int) -> list[Content]:
        key = self._view_key(width, height)
        if key == self._built_key and self._lines:
            return self._lines
        self._built_key = key
        if not self._rows:
            return [Content.styled(EMPTY_MESSAGE, "$text-muted")]
        ranks = self._rank_count()
        # The table scrolls unless its rows, a one-line detail and the ranks all fit.
        self._scrolls = 2 + len(self._rows) + (ranks + 1 if ranks else 0) > height
        detail = self._detail(width, self._scrolls)
        # Short of room, the tables come first: three rows each before the detail's lines.
        wanted = 1 + min(len(self._rows), ALWAYS_SHOWN) + (1 + min(ranks, 3) if ranks else 0)
        detail = detail[: max(0, height - wanted)]
        room = height - 1 - len(detail) - (1 if ranks else 0)
        jobs_shown = min(len(self._rows), max(room - ranks, (room + 1) // 2 if ranks else room, 1))
        lines = self._jobs_lines(width, jobs_shown)
        lines += detail
        if ranks:
            lines += self._rank_lines(width, max(0, room - jobs_shown))
        return lines[:height]

    def _longest(self) -> int:
        return max((len(r.name) for r in self._rows if isinstance(r, JobGroup)), default=3)

    def _jobs_lines(self, width: int, shown: int) -> list[Content]:
        self._top = scroll_top(self._cursor, self._top, len(self._rows), shown)
        self._jobs_shown = shown
        marker = more_marker(self._top, len(self._rows) - self._top - shown)
        columns = job_columns(width, marker, self._scrolls, self._longest())
        lines = [header_line(columns, width, marker)]
        cursor = self.has_focus and not self.in_ranks
        for index in range(self._top, self._top + shown):
            row, here = self._rows[index], index == self._cursor
            if isinstance(row, EndedSummary):
                lines.append(summary_row(row, width, cursor and here))
            else:
                history = tuple(self._history.get(row.key, ()))
                lines.append(
                    job_row(row, columns, width, self._now, cursor and here, here, history)
                )
        return lines

    def _rank_lines(self, width: int, shown: int) -> list[Content]:
        group = self.focused
        assert group is not None
        count = len(group.ranks)
        self._rank_top = scroll_top(self._rank_cursor, self._rank_top, count, shown)
        marker = more_marker(self._rank_top, count - self._rank_top - shown)
        columns = rank_columns(group.ranks, width - marker_room(marker))
        header = header_line(columns, width, marker)
        cursor = self._rank_cursor if self.in_ranks and self.has_focus else None
        rows = range(self._rank_top, self._rank_top + min(shown, count))
        return [header, *rank_rows(group, columns, width, rows, cursor)]

    # Keys --------------------------------------------------------------------------------

    def action_move(self, delta: int) -> None:
        """Move the cursor in the jobs table, or in the rank table after Enter."""
        if self.in_ranks and self.focused is not None:
            last = len(self.focused.ranks) - 1
            self._rank_cursor = max(0, min(self._rank_cursor + delta, last))
            self._set_focus_key()
        elif self._rows:
            self._cursor = max(0, min(self._cursor + delta, len(self._rows) - 1))
            self._set_focus_key()
            self._place_rows()  # a folded job the cursor kept open folds once it leaves
        self.redraw()

    def action_page(self, pages: int) -> None:
        self.action_move(pages * max(1, self.content_size.height // 2))

    def action_enter(self) -> None:
        """On the ended-jobs row: expand it; on a multi-rank job: step into its ranks."""
        if self._rows and isinstance(self._rows[self._cursor], EndedSummary):
            self.action_toggle_ended()
            return
        self.in_ranks = not self.in_ranks and self._rank_count() > 0
        self._set_focus_key()
        self.redraw()

    def action_leave_ranks(self) -> None:
        self.in_ranks = False
        self._set_focus_key()
        self.redraw()

    def action_toggle_ended(self) -> None:
        """Show or hide the jobs that ended more than 30 s ago, one row each."""
        self.expanded = not self.expanded
        self._place_rows()
        self.redraw()

    def on_click(self, event: events.Click) -> None:
        """Select the clicked job row (line 0 is the header)."""
        if 1 <= event.y <= self._jobs_shown:
            self.in_ranks = False
            self.action_move(self._top + event.y - 1 - self._cursor)
