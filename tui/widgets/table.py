"""Columns, rows and a scrolling cursor for the line-drawn tables of the attach-mode panels.

The jobs, rank and DataLoader tables share one shape: fixed-width numeric columns, one
flexible name column, columns dropped by priority when the width runs out (the way htop drops
meters, so 80 columns keep the figures that matter), and a cursor that scrolls a window over
more rows than fit.  Rows are built as flat runs (:class:`~traintop.tui.line.Line`), so the panel
repaints only the lines whose text changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from textual.binding import Binding
from textual.content import Content
from textual.widget import Widget

from traintop.tui.line import Line
from traintop.views.format import truncate

HEADER_STYLE = "bold reverse"
CURSOR_STYLE = "reverse"
Cell = tuple[str, str]  # (text, Textual style string; "" for the default)


@dataclass(frozen=True, slots=True)
class Column:
    """One column; ``drop`` orders which go first when the width runs out (0: never)."""

    label: str
    width: int  # for the flexible column: the most it takes
    left: bool = False
    drop: int = 0
    flex: bool = False  # takes the width the others leave, between ``minimum`` and ``width``
    minimum: int = 0


def fit_columns(columns: Sequence[Column], width: int) -> tuple[Column, ...]:
    """Columns that fit ``width``: the highest ``drop`` goes first while the flexible column
    would get less than its minimum, then the flexible column takes what is left."""
    kept = list(columns)
    flex = next((c for c in kept if c.flex), None)
    need = flex.minimum if flex is not None else 0
    while _cells(kept, flex) + need > width and max(c.drop for c in kept) > 0:
        kept.remove(max(kept, key=lambda c: c.drop))
    if flex is None:
        return tuple(kept)
    room = max(1, min(flex.width, width - _cells(kept, flex) - 1))
    return tuple(replace(c, width=room) if c is flex else c for c in kept)


def _cells(columns: Sequence[Column], flex: Column | None) -> int:
    """Cells the fixed columns take with their separators."""
    return sum(c.width + 1 for c in columns if c is not flex)


def header_line(columns: Sequence[Column], width: int, marker: str = "") -> Content:
    """Column labels in reverse video, as htop's header, with ``marker`` ("▼ 20 more") at
    the right end in place of the last labels it would run into."""
    room = width - len(marker) - 2 if marker else width
    text = ""
    for column in columns:
        cell = _pad(column.label, column)
        if text and len(text) + 1 + len(cell.rstrip()) > room:
            break
        text = f"{text} {cell}" if text else cell
    text = text[:room]
    if marker:
        text = text.ljust(width - len(marker) - 1) + marker
    return Content.styled(text.ljust(width)[:width], HEADER_STYLE)


def row_line(cells: Sequence[Cell], columns: Sequence[Column], width: int, cursor: bool) -> Content:
    """One row, each cell padded to its column; the cursor row in reverse video."""
    line = Line()
    for index, (column, (text, style)) in enumerate(zip(columns, cells, strict=False)):
        # The separator joins the cell's run: half the runs, and a styled blank looks blank.
        line.add(" " + _pad(text, column) if index else _pad(text, column), style)
    text_len = len(line)
    if text_len < width:
        line.add(" " * (width - text_len))
    content = line.content()
    if cursor:
        return Content.styled(content.plain[:width], CURSOR_STYLE)
    return content if text_len <= width else content[:width]


def _pad(text: str, column: Column) -> str:
    text = truncate(text, column.width)
    return text.ljust(column.width) if column.left else text.rjust(column.width)


def help_bindings(widget: type[Widget]) -> list[Binding]:
    """A table's keys for the help screen: its shown ones (arrows and paging go without
    saying, ``cursor_bindings``)."""
    return [binding for binding in widget.BINDINGS if isinstance(binding, Binding) and binding.show]


def cursor_bindings(page_up: str = "page(-1)", page_down: str = "page(1)") -> list[Binding]:
    """The keys a table's cursor moves with: arrows, paging, Home and End.  They stay out of
    the footer and the help screen: every scrolling table has them."""
    return [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", page_up, "Page up", show=False),
        Binding("pagedown", page_down, "Page down", show=False),
        Binding("home", "move(-1000000)", "First", show=False),
        Binding("end", "move(1000000)", "Last", show=False),
    ]


def scroll_top(cursor: int, top: int, rows: int, visible: int) -> int:
    """The first row to show so that ``cursor`` is on screen and no space is left unused."""
    if visible <= 0:
        return 0
    top = min(top, cursor, max(0, rows - visible))
    return max(top, cursor - visible + 1, 0)


def marker_room(marker: str) -> int:
    """Cells a table leaves free at the right of its header for ``marker``."""
    return len(marker) + 1 if marker else 0


def more_marker(hidden_above: int, hidden_below: int) -> str:
    """ "▲ 3 ▼ 20 more" for a table that does not show every row (empty when it does)."""
    parts = ([f"▲ {hidden_above}"] if hidden_above else []) + (
        [f"▼ {hidden_below}"] if hidden_below else []
    )
    return f"{' '.join(parts)} more" if parts else ""
