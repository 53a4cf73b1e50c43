"""Shared shape of the disk and network panels: a header line and one line per device,
each ending in a rate sparkline whose history the panel keeps across ticks."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from textual.content import Content

from tui.format import sparkline, truncate

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

    Each row brings its cells, its history and the value drawn as a full block.
    """
    spark = width - sum(cell for _, cell in header) - len(header) - 1
    heads = [
        truncate(label, cell).ljust(cell) if i == 0 else truncate(label, cell).rjust(cell)
        for i, (label, cell) in enumerate(header)
    ]
    title = " ".join(heads) + ("  history" if spark >= 8 else "")
    lines = [Content.styled(title, "dim").truncate(width)]
    for cells, history, top in rows:
        widths = [cell for _, cell in header]
        parts = [
            _fit(c, w, first=i == 0) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        line = Content(" ").join(parts)
        if spark >= 8:
            line = Content.assemble(line, "  ", (sparkline(history, spark, top), "$primary"))
        lines.append(line.truncate(width))
    return lines


def _fit(cell: Content | str, width: int, *, first: bool) -> Content:
    content = Content(cell) if isinstance(cell, str) else cell
    content = content.truncate(width, ellipsis=True)
    pad = width - content.cell_length
    return content.pad_right(pad) if first else content.pad_left(pad)
