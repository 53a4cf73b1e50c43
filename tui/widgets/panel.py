"""The base of every text panel: lines built from the latest snapshot, repainted line by line.

Panels are rebuilt once per tick, so the cost that matters is Textual repainting them.  A panel
keeps the ``Content`` and the rendered ``Strip`` of each line, compares the new lines with the old
ones and marks only the lines that differ as dirty, so an unchanged line costs nothing, neither
here nor in the compositor.  It asks for a new layout only when its number of lines changes.
A line that does change keeps most of its styled runs where they were, so the Rich style of
each run (a new object per cell offset, which text selection needs) is cached as well, already
as Textual's ANSI-to-truecolor filter makes it (the filter would otherwise go over every
segment of every changed line), and the border and padding around a changed line come from a
frame cached per style (tui/widgets/framed_rows.py) instead of being built again per line.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from itertools import pairwise
from typing import ClassVar

from rich.cells import cell_len
from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.content import Content, Span
from textual.filter import ANSIToTruecolor, LineFilter
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.style import Style
from textual.widget import Widget

from traintop.collectors.snapshot import Snapshot
from traintop.tui import chops
from traintop.tui.widgets.framed_rows import FramedRows
from traintop.views.row_moves import plan_moves

# Distinct (style, x, y) runs seen before the cache starts over: a few hundred on a full screen.
_STYLE_CACHE_MAX = 4096
_PAD = (None, -1, -1)  # the cache key of the padding's style


def _flat_runs(line: Content) -> list[tuple[str, str | Style | None]] | None:
    """``(text, style)`` runs of a line whose spans follow one another without nesting (the
    style is ``None`` between spans), or ``None`` when spans overlap."""
    text, spans, pos = line.plain, line.spans, 0
    runs: list[tuple[str, str | Style | None]] = []
    for span in spans:
        start, end = span.start, span.end
        if start < pos:
            return None
        if start > pos:
            runs.append((text[pos:start], None))
        if end > start:
            runs.append((text[start:end], span.style))
            pos = end
    if pos < len(text):
        runs.append((text[pos:], None))
    return runs


def narrow(text: str) -> bool:
    """Whether every character of ``text`` takes one cell, so cells are ``len(text)``.

    Measured per distinct character: Rich measures a string it has not seen character by
    character unless all are Latin or box drawing, and a GPU row's arrows made that 60 µs.
    """
    return (text.isascii() and text.isprintable()) or all(cell_len(c) == 1 for c in set(text))


def changed_runs(old: Content, new: Content) -> list[tuple[int, int]]:
    """The runs of cells ``[start, end)`` of a line that differ in text or style, in order.

    Only those are marked dirty, and Textual then sends only the runs that touch them: a GPU
    row whose temperature went from 62 to 63 sends a few cells, not 200 cells and their colour
    codes (over SSH that was most of the monitor's traffic).  Two changes apart by fewer than
    ``_GAP`` unchanged cells stay one run: a new run costs a cursor move and the style sent
    again, which is what resending those few cells costs.  Lines hold narrow characters only
    (one cell each), and are padded to the width, so a shorter line clears its old tail.
    """
    cells = _text_runs(old.plain, new.plain) + _span_runs(old.spans, new.spans)
    if not cells:
        start = len(old.plain) + len(new.plain)
        return [(start, start + 1)]
    cells.sort()
    runs = [cells[0]]
    for start, end in cells[1:]:
        last_start, last_end = runs[-1]
        if start - last_end < _GAP:
            runs[-1] = (last_start, max(last_end, end))
        else:
            runs.append((start, end))
    return [(start, max(end, start + 1)) for start, end in runs]


def _span_runs(old: Sequence[Span], new: Sequence[Span]) -> list[tuple[int, int]]:
    """The cells whose style may differ: those of every span in one line and not the other,
    but of a span that only grew or shrank (a bar's fill, same start or end and style) only
    the cells between its two ends.  Only where neither line's spans overlap: then each cell
    has at most one span, so a cell inside both extents keeps its style."""
    if old == new:  # most lines: compared in C
        return []
    gone, came = set(old).difference(new), set(new).difference(old)
    if not (_disjoint(old) and _disjoint(new)):
        return [(span.start, span.end) for span in gone | came]
    runs = []
    starts = {(span.start, span.style): span for span in gone}
    ends = {(span.end, span.style): span for span in gone}
    for span in came:
        was = starts.pop((span.start, span.style), None) or ends.pop((span.end, span.style), None)
        if was is None or was not in gone:
            runs.append((span.start, span.end))
            continue
        gone.discard(was)
        low, high = sorted((was.start, span.start) if was.end == span.end else (was.end, span.end))
        runs.append((low, high))
    return runs + [(span.start, span.end) for span in gone]


def _disjoint(spans: Sequence[Span]) -> bool:
    """Whether ``spans`` follow one another without overlapping (as ``_flat_runs`` wants)."""
    return all(a.end <= b.start for a, b in pairwise(spans))


# Unchanged cells worth resending rather than starting a new run: a cursor move ("\x1b[y;xH")
# and the run's colours again cost 15-25 bytes, a cell 1-3 bytes plus any colour change in it.
_GAP = 12
_BLOCK = _GAP // 2
"""Cells compared at once.  Half the gap: changes in two neighbouring blocks (a header's uptime
and its clock, 18 cells apart) were one run; blocks this size keep them two wherever the
unchanged cells between make a new run worth its cursor move."""


def _text_runs(a: str, b: str) -> list[tuple[int, int]]:
    """Runs of differing characters, found block by block (slice compares run in C) and
    narrowed to the exact first and last differing character of each run."""
    length = max(len(a), len(b))
    runs: list[tuple[int, int]] = []
    first = _common_prefix(a, b)  # the blocks before the first change are not compared
    for pos in range(first - first % _BLOCK, length, _BLOCK):
        if a[pos : pos + _BLOCK] != b[pos : pos + _BLOCK]:
            if runs and runs[-1][1] == pos:
                runs[-1] = (runs[-1][0], pos + _BLOCK)
            else:
                runs.append((pos, pos + _BLOCK))
    return [_narrow(a, b, start, min(end, length)) for start, end in runs]


def _narrow(a: str, b: str, start: int, end: int) -> tuple[int, int]:
    """``[start, end)`` without the leading and trailing characters that did not change."""
    first = start + _common_prefix(a[start:end], b[start:end])
    tail = _common_prefix(a[first:end][::-1], b[first:end][::-1]) if len(a) >= end <= len(b) else 0
    return first, end - tail


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix, by bisection over slice compares (done in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid - 1)
    return lo


def set_border_subtitle(widget: Widget, subtitle: str) -> None:
    """Show ``subtitle`` in the bottom border, repainting only the border cells it can touch.

    Assigning ``border_subtitle`` repaints the whole widget: a process table whose "61 shown"
    became "62 shown" resent its rows and both borders every tick (a third of the bytes).
    """
    before = widget.border_subtitle
    if subtitle == before:
        return
    if not widget.is_mounted:
        widget.border_subtitle = subtitle
        return
    widget._border_subtitle = widget.render_str(subtitle).expand_tabs(4).split()[0]
    width, height = widget.outer_size  # the border's box (``size`` is the content's)
    left, top = widget.content_offset
    start = 0
    if widget.styles.border_subtitle_align == "right":  # the label ends at the right corner
        start = max(0, width - max(len(before or ""), len(subtitle)) - _LABEL_PAD)
    widget.refresh(Region(start - left, height - 1 - top, width - start, 1))


# Cells between a right-aligned border label and the widget's edge: the corner, a rule cell
# and the spaces Textual puts around the label.
_LABEL_PAD = 4


def _differs(new: Content, old: Content) -> bool:
    return new.plain != old.plain or new.spans != old.spans


def _runs(old: Content, new: Content, y: int, width: int) -> list[Region]:
    """The changed runs of line ``y`` that was ``old`` on the terminal, as regions."""
    return [
        Region(start, y, min(end, width) - start, 1)
        for start, end in changed_runs(old, new)
        if start < width  # a change past the right edge shows nothing new
    ]


MOVE_BYTES = 12
"""About what a line move sends (a cursor move and a delete or insert)."""
_RUN_BYTES = 12
"""About what a repainted run sends besides its cells (a cursor move, a colour)."""


def _cost(regions: list[Region]) -> int:
    """About the bytes that repainting ``regions`` sends."""
    return sum(region.width + _RUN_BYTES for region in regions)


class LineWidget(Widget):
    """A widget drawn from a list of one-line ``Content`` through the Line API."""

    MOVING_FROM: ClassVar[int] = 0
    """The first line that ``set_lines`` keys may move (those above stay put: a header)."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._styles_cache = FramedRows()
        self._lines: list[Content] = [Content("")]
        self._painted: list[Content] | None = None  # the lines the terminal shows, if known
        self._keys: Sequence[Hashable] | None = None
        self._strips: dict[int, Strip] = {}
        self._cut = 0  # the width the strips were cut to
        self._run_styles: dict[tuple[str | Style | None, int, int], RichStyle] = {}
        # The app's ANSI-to-truecolor filters and the background they blend dim text into.
        self._truecolor: tuple[list[ANSIToTruecolor], RichColor] | None = None

    @property
    def lines(self) -> list[Content]:
        """The lines on screen (for tests and for widgets stacking text)."""
        return list(self._lines)

    def render(self) -> Content:
        """All lines as one Content, for tests and screenshots; drawing uses ``render_line``."""
        return Content("\n").join(self._lines)

    def set_lines(self, lines: list[Content], keys: Sequence[Hashable] | None = None) -> None:
        """Show ``lines``; repaint only those that changed, lay out only if the count changed.

        ``keys`` name what each line from ``MOVING_FROM`` on shows (a process's pid): where
        such lines moved and moving them costs less, the terminal moves them
        (views/row_moves.py) and only what differs after the move is repainted."""
        old_keys, self._keys = self._keys, keys
        if len(lines) != len(self._lines):
            self._lines, self._strips = lines, {}
            self.refresh(layout=True)
            return
        changed = [y for y, new in enumerate(lines) if _differs(new, self._lines[y])]
        for y in changed:
            self._strips.pop(y, None)
        width = self.content_size.width
        dirty = [r for y in changed for r in _runs(self._lines[y], lines[y], y, width)]
        moved = self._after_moves(old_keys, keys, lines, dirty) if changed else None
        if moved is not None:
            dirty = moved
            top = self.content_offset.y  # Textual's cache of the framed rows, not a repaint
            self._styles_cache.set_dirty(*(Region(0, top + y, 1, 1) for y in changed))
        if not dirty and self._painted is self._lines:
            self._painted = lines  # the terminal still shows them all
        self._lines = lines
        if dirty:
            self.refresh(*dirty)  # one call: each one looks the widget up on the screen

    def _outer_row(self, y: int) -> Region:
        """Line ``y`` with the border and padding beside it (a blank line is drawn whole)."""
        return Region(-self.content_offset.x, y, self.outer_size.width, 1)

    def _after_moves(
        self, old_keys: Sequence[Hashable] | None, keys: Sequence[Hashable] | None,
        lines: list[Content], in_place: list[Region],
    ) -> list[Region] | None:  # fmt: skip
        """What to repaint once the terminal moved the lines (asked of tui/chops.py here),
        where that sends less than repainting ``in_place``; ``None`` to repaint in place."""
        source = self._moves(old_keys, keys)
        if source is None:
            return None
        ops, source = source
        dirty, width = [], self.content_size.width
        for y, new in enumerate(lines):
            shown = source[y]
            if shown is None:
                dirty.append(self._outer_row(y))
            elif _differs(new, self._lines[shown]):
                dirty += _runs(self._lines[shown], new, y, width)
        if _cost(dirty) + MOVE_BYTES * len(ops) >= _cost(in_place):
            return None
        first = self.MOVING_FROM
        area = Region(0, self.content_region.y + first, self.screen.size.width,
                      len(lines) - first)  # fmt: skip
        return dirty if chops.request_moves(self, area, ops) else None

    def _moves(
        self, old: Sequence[Hashable] | None, new: Sequence[Hashable] | None
    ) -> tuple[tuple[tuple[int, int], ...], list[int | None]] | None:
        """The moves from ``old`` to ``new`` keys and, for each line, the line the terminal
        shows there after them; ``None`` without moves.  Only while the terminal shows every
        line held (``lines_painted``): the moves act on what it shows."""
        if new is not None:
            chops.watch(self)
        if old is None or new is None or self._painted is not self._lines:
            return None
        if self.text_selection is not None:  # the highlight stays where the mouse put it
            return None
        moves = plan_moves(old, new)
        if moves is None:
            return None
        first = self.MOVING_FROM
        return moves.ops, [*range(first), *(None if s is None else s + first for s in moves.source)]

    def lines_painted(self) -> None:
        """The terminal shows every line held (tui/chops.py, after a screen update)."""
        self._painted = self._lines

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        if width != self._cut:  # the strips were cut to another width; run styles hold
            self._strips, self._cut = {}, width
        strip = self._strips.get(y)
        if strip is None:
            line = self._lines[y] if y < len(self._lines) else Content("")
            strip = self._strips[y] = self._to_strip(line, width, y)
        return strip

    def _to_strip(self, line: Content, width: int, y: int) -> Strip:
        """One line to one strip, cropped or padded to ``width``.

        A direct walk over the line's runs: ``Visual.to_strips`` would also wrap and align,
        which one pre-cut line never needs (it was 40 % of a tick), and ``Content.render``
        keeps a style stack for nested spans, which lines built by :class:`~traintop.tui.line.Line`
        never have.  Offsets go into the styles as there, so mouse text selection keeps
        working; building those Rich styles was the other half of the cost, hence the cache.
        """
        runs = _flat_runs(line)
        if runs is None:  # nested spans: let Content combine them
            runs = [(text, part) for text, part in line.render(Style(), end="")]
        cache = self._run_styles
        if len(cache) > _STYLE_CACHE_MAX:
            cache.clear()
        segments, x = [], 0
        for text, part in runs:
            rich_style = cache.get((part, x, y))
            if rich_style is None:
                rich_style = cache[part, x, y] = self._run_style(part, x, y)
            segments.append(Segment(text, rich_style))
            x += len(text)
        return self._fit(segments, line, width)

    def _fit(self, segments: list[Segment], line: Content, width: int) -> Strip:
        """The line's segments padded (in the widget's style) or cropped to ``width`` cells."""
        pad = self._run_styles.get(_PAD)
        if pad is None:  # the widget's own style, without an offset, as crop_extend pads
            pad = self._run_styles[_PAD] = self._run_style(*_PAD)
        if not narrow(line.plain):  # a wide or zero-width character: let Strip count cells
            return Strip(segments).crop_extend(0, width, pad)
        if len(line.plain) > width:
            return Strip(segments, len(line.plain)).crop(0, width)
        if len(line.plain) < width:
            segments.append(Segment(" " * (width - len(line.plain)), pad))
        return Strip(segments, width)

    def _run_style(self, part: str | Style | None, x: int, y: int) -> RichStyle:
        """The Rich style of one run: the widget's style plus the run's, with its offset
        (none for ``x`` < 0), already as the ANSI-to-truecolor filter makes it."""
        style = self.visual_style
        if part is not None:
            parsed = part if isinstance(part, Style) else self._get_style(part)
            style = Style.combine([style, parsed])
        rich_style = style.rich_style_with_offset(x, y) if x >= 0 else style.rich_style
        if self._truecolor is None:  # looked up once per style change: 10 µs each
            filters = [f for f in self.app.get_line_filters() if isinstance(f, ANSIToTruecolor)]
            self._truecolor = (filters, self.background_colors[1].rich_color)
        filters, background = self._truecolor
        for truecolor in filters:
            rich_style = truecolor.truecolor_style(rich_style, background)
        return rich_style

    def get_line_filters(self) -> Sequence[LineFilter]:
        """The app's line filters but ANSI-to-truecolor, which the run styles already went
        through once (the filter rebuilds every segment of every changed line, each tick).
        Borders and padding it would leave alone: their colours are theme colours."""
        return [f for f in self.app.get_line_filters() if not isinstance(f, ANSIToTruecolor)]

    def notify_style_update(self) -> None:
        """A theme or CSS change restyles every line: drop the rendered strips."""
        super().notify_style_update()
        self._strips, self._run_styles, self._truecolor = {}, {}, None

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines)


class Panel(LineWidget):
    """A bordered panel whose title shows its toggle key ("1 GPU")."""

    KEY: ClassVar[str] = ""
    TITLE: ClassVar[str] = ""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="panel")
        self.border_title = f"{self.KEY} {self.TITLE}"
        self._snapshot: Snapshot | None = None
        self._lines = [Content("waiting for the first sample…")]
        self._built_width = 0
        self._made: tuple[Snapshot, int, list[Content]] | None = None  # see _lines_at

    def record(self, snapshot: Snapshot) -> None:
        """Keep history from every snapshot, also while the display is paused."""

    def show(self, snapshot: Snapshot) -> None:
        """Display ``snapshot``; repaints only the lines whose text or style changed."""
        self._snapshot = snapshot
        self._rebuild(self.content_size.width)

    def build_lines(self, snapshot: Snapshot, width: int) -> list[Content]:
        """The panel's lines for ``snapshot`` at ``width`` cells; subclasses implement it."""
        raise NotImplementedError

    def on_resize(self) -> None:
        # Textual's first Resize comes after the first paint, at the width painted
        # (render_line): the lines of that width are already on screen.
        if self.content_size.width != self._built_width:
            self._rebuild(self.content_size.width)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self._snapshot is None:
            return 1
        return len(self._lines_at(self._snapshot, width))

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        if self._snapshot is not None and 0 < width != self._built_width:
            # The first paint after a layout comes before the Resize event: draw the snapshot
            # at the width being painted, not the lines of the old width (or "waiting").
            self._lines, self._strips = self._lines_at(self._snapshot, width), {}
            self._built_width = width
        return super().render_line(y)

    def _rebuild(self, width: int) -> None:
        if self._snapshot is None or width <= 0:
            return
        self.set_lines(self._lines_at(self._snapshot, width))
        self._built_width = width

    def _lines_at(self, snapshot: Snapshot, width: int) -> list[Content]:
        """The lines of ``snapshot`` at ``width``, built once: a layout measures the panel
        by them (``get_content_height``) and the paint after it draws them, and Textual lays
        the screen out four times as it starts."""
        made = self._made
        if made is None or made[0] is not snapshot or made[1] != width:
            made = self._made = (snapshot, width, self.build_lines(snapshot, width))
        return made[2]
