"""Textual's screen updates written with less: only the changed cells, colours as differences.

Two things made Textual 8's terminal output heavier than the screen change it carries:

* ``ChopsUpdate.render_segments`` crops each widget's strip only at ``x2``: it always starts at
  the widget's left edge, so a GPU row whose temperature changed was resent from its border on.
  Here each span starts at ``x1`` too, with a cursor move there; cells outside the span were not
  dirty, so the screen is the same.
* Rich writes every styled run as the run's whole style, its text and a reset, so on a panel
  row of twenty runs with one background most of the bytes were colour codes that changed
  nothing.  A :class:`Pen` keeps the style the terminal is in and sends only what differs
  (views/sgr.py), across spans and lines too, and leaves the terminal reset at the end.

Both kinds of update (the partial one of a tick, the full one after a layout) go through the
pen, which reads the strips' segments in place: no cropped ``Strip`` is built per span, and
nothing is parsed back out of rendered text.  And the partial update renders only what it
sends: the dirty lines, of the widgets on them that are not hidden behind others (Textual
renders every widget overlapping the box around all dirty regions, whole).  Installed by the
terminal driver (tui/driver.py) only, so Pilot tests and SVG screenshots, which do not write
to a terminal, run Textual unchanged; tests/test_tui_terminal.py checks the screen they leave
against a full repaint.

A list widget whose rows moved (a process that climbed the table) has the terminal move them
itself (:func:`request_moves`, views/row_moves.py): the update starts with line deletes and
inserts inside a scroll region around the list, and carries only what differs after them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Protocol
from weakref import WeakSet

from rich.cells import cell_len
from rich.color import ColorSystem
from rich.console import Console
from rich.segment import Segment
from rich.style import Style as RichStyle
from textual._compositor import ChopsUpdate, Compositor, LayoutUpdate
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from traintop.views import sgr


class Moving(Protocol):
    """A widget that moves its rows on the terminal (``LineWidget``): told when the terminal
    shows all it holds, which is when moves computed from its lines are right."""

    def lines_painted(self) -> None: ...


# Distinct (from, to) style pairs seen before the switch cache starts over.
_SWITCHES_MAX = 4096
_switches: dict[tuple[str, str], str] = {}


class Pen:
    """Terminal data for styled text, sending each style change as a difference.

    With ``erase`` (a terminal that erases in the current background, terminfo's ``bce``), a
    run of blanks at the end of a segment (a command column padded to the width, a row
    drawn whole) is erased (ECH) instead of written, and the cursor stepped over it (CUF)
    only where more text follows: a dozen bytes for up to a row of spaces.
    """

    __slots__ = ("_colors", "_erase", "_move", "_now", "_parts", "_skip")

    def __init__(self, console: Console, erase: bool = False) -> None:
        self._parts: list[str] = []
        self._now = ""  # SGR parameters in force: "" is the reset state each write starts in
        self._move = ""  # a cursor move not sent yet: only text that follows needs it
        self._skip = 0  # cells erased but not stepped over yet: only text that follows needs it
        self._colors = console._color_system or ColorSystem.TRUECOLOR
        self._erase = erase

    def move_to(self, x: int, y: int) -> None:
        """Put the cursor at cell ``(x, y)`` (moves do not change the style in force)."""
        self._move = f"\x1b[{y + 1};{x + 1}H"

    def write(self, segments: Iterable[Segment]) -> None:
        """Append the segments' text, each in its style (a control segment's text as is)."""
        parts = self._parts
        for text, style, _ in segments:
            if not text:
                continue
            if self._move or self._skip:
                parts.append(self._move or f"\x1b[{self._skip}C")
                self._move, self._skip = "", 0
            if style is not None and style._link:
                self._link(text, style)
                continue
            ansi = "" if style is None else style._ansi
            if ansi is None:
                ansi = Strip.render_ansi(style, self._colors)
            if ansi != self._now:
                parts.append(switch(self._now, ansi))
                self._now = ansi
            if self._erase and text.endswith(_BLANKS) and erasable(ansi):
                self._erase_tail(text)
            else:
                parts.append(text)

    def _erase_tail(self, text: str) -> None:
        """``text`` with its trailing blanks erased in the style in force, not written."""
        body = text.rstrip(" ")
        if body:
            self._parts.append(body)
        self._skip = len(text) - len(body)
        self._parts.append(f"\x1b[{self._skip}X")

    def _link(self, text: str, style: RichStyle) -> None:
        """A hyperlinked run as Rich writes it, from the reset state (it ends reset too)."""
        self._parts.append(switch(self._now, ""))
        self._parts.append(Strip.render_style(style, text, self._colors))
        self._now = ""

    def control(self, codes: str) -> None:
        """Append control sequences that change no style (line moves)."""
        self._parts.append(codes)

    def finish(self) -> str:
        """Everything written, ending in the reset state Rich's own output ends in."""
        self._parts.append(switch(self._now, ""))
        return "".join(self._parts)


_BLANKS = " " * 12
"""The fewest trailing blanks erased rather than written: ECH and CUF cost about ten bytes."""
_erasable: dict[str, bool] = {}
_SHOWN_ON_BLANKS = frozenset((4, 7, 8, 9))
"""Underline, reverse, conceal, strike: attributes a written blank shows and an erased one
would not (an erase keeps only the background)."""


def erasable(ansi: str) -> bool:
    """Whether a blank in style ``ansi`` (SGR parameters) looks like an erased cell."""
    found = _erasable.get(ansi)
    if found is None:
        if len(_erasable) >= _SWITCHES_MAX:
            _erasable.clear()
        style = sgr.parse(ansi)
        found = _erasable[ansi] = style is not None and not style.attrs & _SHOWN_ON_BLANKS
    return found


def switch(old: str, new: str) -> str:
    """The SGR sequence from style ``old`` to ``new`` (parameter strings), cached."""
    code = _switches.get((old, new))
    if code is None:
        if len(_switches) >= _SWITCHES_MAX:
            _switches.clear()
        code = _switches[old, new] = sgr.switch(old, new)
    return code


def cells(strip: Strip, start: int, end: int) -> Iterable[Segment]:
    """The segments of ``strip`` covering cells ``[start, end)``, cut at both ends."""
    if start <= 0 and end >= strip.cell_length:
        return strip
    return _cut(strip, start, end)


def _cut(strip: Strip, start: int, end: int) -> Iterator[Segment]:
    pos = 0
    for segment in strip:
        stop = pos + cell_len(segment.text)
        if stop > start:
            if pos < start:
                segment = segment.split_cells(start - pos)[1]
            if stop > end:
                segment = segment.split_cells(end - max(pos, start))[0]
            yield segment
            if stop >= end:
                return
        pos = stop


def render_segments(self: ChopsUpdate, console: Console) -> str:
    """Raw terminal data for a partial update: each span's cells, from ``x1`` to ``x2`` only."""
    pen = Pen(console, _erase_blanks)
    if isinstance(self, MovingUpdate):
        pen.control(self.moves)
    for y, x1, x2 in self.spans:
        for end, (x, strip) in zip(self.chop_ends[y], self.chops[y].items(), strict=False):
            if strip is None or x > x2 or end <= x1:
                continue
            left = max(x, x1)
            pen.move_to(left, y)
            pen.write(cells(strip, left - x, min(end, x2) - x))
    return pen.finish()


def render_layout(self: LayoutUpdate, console: Console) -> str:
    """Raw terminal data for a full repaint (start-up, resize, a new layout): every line."""
    pen = Pen(console, _erase_blanks)
    for y, line in enumerate(self.strips, self.region.y):
        pen.move_to(self.region.x, y)
        for strip in line:
            pen.write(strip)
    return pen.finish()


def render_partial_update(self: Compositor) -> ChopsUpdate | None:
    """The update of the dirty regions, rendering only the lines it sends, of the widgets on
    them (Textual 8 renders every widget overlapping the box around all dirty regions, each
    whole: with one change at the top of the screen and one at the bottom, every widget
    looks up its colours, title and every cached line, every tick)."""
    regions = self._dirty_regions.copy()
    self._dirty_regions.clear()
    moves = _take_moves(self, regions)
    if not regions:
        _tell_painted(self)
        return None
    spans = list(self._regions_to_spans(regions))
    lines = sorted({y for y, _, _ in spans})
    cuts = self.cuts
    chops: list[dict[int, Strip | None]] = [dict.fromkeys(line[:-1]) for line in cuts]
    for widget, (region, clip) in self.visible_widgets.items():
        _render_into(chops, cuts, widget, region, region.intersection(clip), lines)
    _tell_painted(self)
    ends = [line[1:] for line in cuts]
    return MovingUpdate(chops, spans, ends, moves) if moves else ChopsUpdate(chops, spans, ends)


def _render_into(
    chops: list[dict[int, Strip | None]], cuts: list[list[int]], widget: Widget,
    region: Region, visible: Region, lines: list[int],
) -> None:  # fmt: skip
    """The widget's strips on ``lines`` (sorted), cut at the screen's cuts, into the chops
    that no widget in front of it took (the visible widgets come front to back).  A widget
    whose every chop there is taken (the screen and containers behind the panels) is not
    rendered at all."""
    first = bisect_left(lines, visible.y)
    last = bisect_left(lines, visible.bottom) - 1
    low, high = visible.column_span
    wanted = lines[first : last + 1]
    if not wanted or not visible.width or _taken(chops, cuts, wanted, low, high):
        return
    top, bottom = wanted[0], wanted[-1] + 1
    crop = Region(visible.x - region.x, top - region.y, visible.width, bottom - top)
    rows = set(wanted)
    for y, strip in zip(range(top, bottom), widget.render_lines(crop), strict=False):
        if y in rows:
            _fill(chops[y], [cut for cut in cuts[y] if low <= cut <= high], strip, visible.x)


def _fill(chop: dict[int, Strip | None], cuts: list[int], strip: Strip, x: int) -> None:
    """``strip`` (drawn from cell ``x``) cut at ``cuts``, into the pieces still free.

    A strip that is one piece is used as it is: ``Strip.divide`` would cache ``[strip]`` in
    the strip itself, a reference cycle that only the cyclic garbage collector frees (most
    rows of a tick are one piece, and those cycles were most of the monitor's GC work)."""
    ends = [cut - x for cut in cuts[1:]]
    pieces = [strip] if ends == [strip.cell_length] else strip.divide(ends)
    for cut, piece in zip(cuts, pieces, strict=False):
        if chop.get(cut) is None:
            chop[cut] = piece


def _taken(
    chops: list[dict[int, Strip | None]], cuts: list[list[int]], lines: list[int], low: int,
    high: int,
) -> bool:  # fmt: skip
    """Whether widgets in front took every chop of ``lines`` from ``low`` up to ``high``."""
    return all(chops[y].get(cut) is not None for y in lines for cut in cuts[y] if low <= cut < high)


class MovingUpdate(ChopsUpdate):
    """A partial update that first moves rows on the terminal (``moves``: control codes)."""

    def __init__(self, chops: list, spans: list, chop_ends: list, moves: str) -> None:
        super().__init__(chops, spans, chop_ends)
        self.moves = moves


_moves: dict[Widget, tuple[Region, Region, tuple[tuple[int, int], ...]]] = {}
"""Line moves asked for since the last screen update: the widget, its content region then, the
screen rows that move (the whole width), and its ``(row, count)`` deletes (< 0) and inserts
(views/row_moves.py)."""
_watching: WeakSet[Widget] = WeakSet()


def request_moves(widget: Widget, area: Region, ops: tuple[tuple[int, int], ...]) -> bool:
    """Have the next update start with ``ops`` on the screen rows of ``area``; whether it
    will (only with these renders in use, and one request per widget and update).

    The widget marks dirty what differs after the moves.  Where the next update finds the rows
    shared (a toast over them, a scroll bar, a narrower list) or moved, it draws the widget's
    rows whole instead; a full repaint needs no moves."""
    if Compositor.render_partial_update is not render_partial_update or widget in _moves:
        return False
    if not _rows_alone(widget.screen._compositor, widget, area):
        return False  # shared now (a scroll bar beside the list): never worth a whole repaint
    _moves[widget] = (widget.content_region, area, ops)
    return True


def watch(widget: Widget) -> None:
    """Call ``widget.lines_painted()`` after each update that leaves it all on the terminal."""
    _watching.add(widget)


def _take_moves(compositor: Compositor, regions: set[Region]) -> str:
    """The codes of the moves asked for (all of them taken); the region of a widget whose
    moves cannot be made is added to ``regions``, to be drawn whole."""
    codes = []
    for widget, (content, area, ops) in _moves.items():
        if widget.content_region == content and _rows_alone(compositor, widget, area):
            codes.append(_move_codes(area, ops))
        elif widget in compositor.visible_widgets:
            region, clip = compositor.visible_widgets[widget]
            regions.add(region.intersection(clip))
        else:
            widget.refresh()  # hidden, or under another screen: drawn whole when shown
    _moves.clear()
    return "".join(codes)


def _rows_alone(compositor: Compositor, widget: Widget, area: Region) -> bool:
    """Whether ``area`` (whole screen rows) is all visible in ``widget`` and nothing else is
    drawn there (its ancestors lie behind it)."""
    placed = compositor.visible_widgets.get(widget)
    if placed is None or area.width != compositor.size.width:
        return False
    region, clip = placed
    if not region.intersection(clip).contains_region(area):
        return False
    behind = set(widget.ancestors_with_self)
    return not any(
        other not in behind and area.overlaps(other_region.intersection(other_clip))
        for other, (other_region, other_clip) in compositor.visible_widgets.items()
    )


def _move_codes(area: Region, ops: tuple[tuple[int, int], ...]) -> str:
    """DECSTBM around ``area``'s rows, a delete (DL) or insert (IL) per op, margins reset."""
    top = area.y + 1
    codes = [f"\x1b[{top};{area.bottom}r"]
    for row, count in ops:
        codes.append(f"\x1b[{top + row};1H\x1b[{abs(count)}{'L' if count > 0 else 'M'}")
    codes.append("\x1b[r")
    return "".join(codes)


def _tell_painted(compositor: Compositor) -> None:
    """Each watching widget shown by ``compositor`` is all on the terminal once this update
    is written: its dirty regions were all taken."""
    visible = compositor.visible_widgets
    for widget in list(_watching):
        if widget in visible:
            widget.lines_painted()  # pyright: ignore[reportAttributeAccessIssue]  (Moving)


_textual_full_update = Compositor.render_full_update


def render_full_update(self: Compositor, simplify: bool = False) -> LayoutUpdate:
    """Textual's full update; the moves asked for are moot (every row is drawn), and every
    watching widget shown is on the terminal after it.  An export (``simplify``) writes to no
    terminal and changes neither."""
    update = _textual_full_update(self, simplify)
    if not simplify:
        _take_moves(self, set())
        _tell_painted(self)
    return update


_erase_blanks = False
"""Whether the renders erase trailing blanks (``Pen``): set by ``install``."""


def install(erase_blanks: bool = False) -> None:
    """Use these renders for every screen update from now on; ``erase_blanks`` where the
    terminal erases in the current background (see ``Pen``)."""
    global _erase_blanks
    _erase_blanks = erase_blanks
    ChopsUpdate.render_segments = render_segments
    LayoutUpdate.render_segments = render_layout
    Compositor.render_partial_update = render_partial_update
    Compositor.render_full_update = render_full_update
