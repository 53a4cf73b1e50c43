"""Replay's timeline, under the header: play state, speed, time, and the whole recording as a bar
with the moments the verdict changed marked, so a night at ×60 shows where to stop."""

from __future__ import annotations

import time
from collections.abc import Sequence

from textual.content import Content

from traintop.store.replay_source import Position
from traintop.tui.widgets.panel import LineWidget
from traintop.views.format import fmt_duration

PLAYED, AHEAD, CHANGE, HERE = "━", "─", "┃", "●"


class Timeline(LineWidget):
    """One line; ``changes`` are the times (epoch s) at which the recorded verdict changed."""

    DEFAULT_CSS = """
    Timeline { height: 1; background: $panel; padding: 0 1; }
    """

    def __init__(self, changes: Sequence[float], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._changes = tuple(changes)
        self._position: Position | None = None

    def show(self, position: Position) -> None:
        self._position = position
        self.set_lines([timeline_text(position, self._changes, self.content_size.width)])

    def on_resize(self) -> None:
        if self._position is not None:
            self.show(self._position)


def timeline_text(p: Position, changes: Sequence[float], width: int) -> Content:
    """``▶ ×10 14:03:21 +01:02:03/08:00:00 ━━━━┃━━●───┃──``; the bar takes what is left."""
    state = ("▶" if p.playing else "⏸", "bold $success" if p.playing else "bold $warning")
    head = Content.assemble(
        ("REPLAY ", "bold reverse $accent"),
        state,
        f" ×{p.speed:<3}",
        (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(p.t)), "bold"),
        f"  +{fmt_duration(p.t - p.start)}/{fmt_duration(p.end - p.start)}  ",
        (f"{p.index + 1}/{p.count}  ", "dim"),
    )
    return Content.assemble(head, _bar(p, changes, max(0, width - head.cell_length)))


def _bar(p: Position, changes: Sequence[float], width: int) -> Content:
    if width < 3:
        return Content("")
    span = max(p.end - p.start, 1e-9)

    def cell(t: float) -> int:
        return max(0, min(width - 1, int((t - p.start) / span * width)))

    here, marks = cell(p.t), {cell(t) for t in changes}
    runs: list[tuple[str, str]] = []
    for x in range(width):
        if x == here:
            char, style = HERE, "bold $accent"
        elif x in marks:
            char, style = CHANGE, "$warning"
        else:
            char, style = (PLAYED, "$accent") if x < here else (AHEAD, "dim")
        if runs and runs[-1][1] == style:
            runs[-1] = (runs[-1][0] + char, style)
        else:
            runs.append((char, style))
    return Content.assemble(*runs)
