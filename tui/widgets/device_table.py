"""Shared shape of the disk and network panels: a header line and one line per device,
each ending in a rate sparkline whose history the panel keeps across ticks."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from textual.content import Content

from traintop.tui.line import Line
from traintop.views.format import sparkline, truncate

HISTORY_LEN = 120


class RateHistory:
    """A bounded total-throughput series per device name."""

    def __init__(self) -> None:
        self._series: dict[str, deque[float | None]] = {}

    def add(self, name: str, value: float | None) -> None:
        self._series.setdefault(name, deque(maxlen=HISTORY_LEN)).append(value)

    def get(self, name: str) -> tuple[float | None, ...]:
        return tuple(self._series.get(name, ()))


def scale(history: Sequence[float | None], floor: float) -> float:
    """Full scale for a history with no known capacity: its peak, but never below ``floor``,
    so a device idling at a few kB/s draws a flat line instead of full blocks."""
    return max([floor, *(v for v in history if v is not None)])


def total(*rates: float | None) -> float | None:
    """Sum of the known rates; None only when every one is unknown."""
    known = [rate for rate in rates if rate is not None]
    return sum(known) if known else None


def table(
    header: Sequence[tuple[str, int]],
    rows: Iterable[tuple[Sequence[Content | str], Sequence[float | None], float]],
    width: int,
) -> list[Content]:
    """Lay ``rows`` under ``header`` (label, width) pairs and use what is left for history.

    Each row brings its cells, its history and the value drawn as a full block.  Rows are
    built as flat runs (:class:`~traintop.tui.line.Line`): ``Content`` joins, pads and truncates
    made a new ``Content`` per cell: half of what the disk and network panels cost a tick.
    """
    spark = width - sum(cell for _, cell in header) - len(header) - 1
    heads = [
        truncate(label, cell).ljust(cell) if i == 0 else truncate(label, cell).rjust(cell)
        for i, (label, cell) in enumerate(header)
    ]
    title = " ".join(heads) + ("  history" if spark >= 8 else "")
    lines = [Content.styled(title, "dim").truncate(width)]
    for cells, history, top in rows:
        line = Line()
        for i, (cell, (_, cell_width)) in enumerate(zip(cells, header, strict=True)):
            _add_cell(line.add(" " if i else ""), cell, cell_width, first=i == 0)
        if spark >= 8:
            line.add("  ").add(sparkline(history, spark, top), "$primary")
        content = line.content()
        lines.append(content if len(line) <= width else content.truncate(width))
    return lines


def _add_cell(line: Line, cell: Content | str, width: int, *, first: bool) -> None:
    """``cell`` cut to ``width`` cells with an ellipsis, padded left (right for the first)."""
    if isinstance(cell, str):
        text = truncate(cell, width)
        line.add(text.ljust(width) if first else text.rjust(width))
        return
    content = cell.truncate(width, ellipsis=True)
    pad = " " * (width - content.cell_length)
    if not first:
        line.add(pad)
    line.add_content(content)
    if first:
        line.add(pad)
