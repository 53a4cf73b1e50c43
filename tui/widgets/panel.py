"""The base of every text panel: lines built from the latest snapshot, repainted line by line.

Panels are rebuilt once per tick, so the cost that matters is Textual repainting them.  A panel
keeps the ``Content`` and the rendered ``Strip`` of each line, compares the new lines with the old
ones and marks only the lines that differ as dirty, so an unchanged line costs nothing, neither
here nor in the compositor.  It asks for a new layout only when its number of lines changes.
A line that does change keeps most of its styled runs where they were, so the Rich style of
each run (a new object per cell offset, which text selection needs) is cached as well.
"""

from __future__ import annotations

from typing import ClassVar

from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.content import Content
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.style import Style
from textual.widget import Widget

from collectors.snapshot import Snapshot

# Distinct (style, x, y) runs seen before the cache starts over: a few hundred on a full screen.
_STYLE_CACHE_MAX = 4096


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


class LineWidget(Widget):
    """A widget drawn from a list of one-line ``Content`` through the Line API."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._lines: list[Content] = [Content("")]
        self._strips: dict[int, Strip] = {}
        self._run_styles: dict[tuple[Style, int, int], RichStyle] = {}

    @property
    def lines(self) -> list[Content]:
        """The lines on screen (for tests and for widgets stacking text)."""
        return list(self._lines)

    def render(self) -> Content:
        """All lines as one Content, for tests and screenshots; drawing uses ``render_line``."""
        return Content("\n").join(self._lines)

    def set_lines(self, lines: list[Content]) -> None:
        """Show ``lines``; repaint only those that changed, lay out only if the count changed."""
        if len(lines) != len(self._lines):
            self._lines, self._strips = lines, {}
            self.refresh(layout=True)
            return
        width = self.content_size.width
        for y, (new, old) in enumerate(zip(lines, self._lines, strict=True)):
            if new.plain != old.plain or new.spans != old.spans:
                self._strips.pop(y, None)
                self.refresh(Region(0, y, width, 1))
        self._lines = lines

    def render_line(self, y: int) -> Strip:
        strip = self._strips.get(y)
        if strip is None:
            line = self._lines[y] if y < len(self._lines) else Content("")
            strip = self._strips[y] = self._to_strip(line, self.content_size.width, y)
        return strip

    def _to_strip(self, line: Content, width: int, y: int) -> Strip:
        """One line to one strip, cropped or padded to ``width``.

        A direct walk over the line's runs: ``Visual.to_strips`` would also wrap and align,
        which one pre-cut line never needs (it was 40 % of a tick), and ``Content.render``
        keeps a style stack for nested spans, which lines built by :class:`~tui.line.Line`
        never have.  Offsets go into the styles as there, so mouse text selection keeps
        working; building those Rich styles was the other half of the cost, hence the cache.
        """
        runs = _flat_runs(line)
        if runs is None:  # nested spans: let Content combine them
            runs = [(text, part) for text, part in line.render(Style(), end="")]
        style = self.visual_style
        cache = self._run_styles
        if len(cache) > _STYLE_CACHE_MAX:
            cache.clear()
        segments, x = [], 0
        for text, part in runs:
            rich_style = cache.get((part, x, y))
            if rich_style is None:
                rich_style = cache[part, x, y] = self._run_style(style, part, x, y)
            segments.append(Segment(text, rich_style))
            x += len(text)
        return Strip(segments).crop_extend(0, width, style.rich_style)

    def _run_style(self, base: Style, part: str | Style | None, x: int, y: int) -> RichStyle:
        """The Rich style of one run: the widget's style plus the run's, with its offset."""
        if part is None:
            return base.rich_style_with_offset(x, y)
        parsed = part if isinstance(part, Style) else self._get_style(part)
        return Style.combine([base, parsed]).rich_style_with_offset(x, y)

    def notify_style_update(self) -> None:
        """A theme or CSS change restyles every line: drop the rendered strips."""
        super().notify_style_update()
        self._strips, self._run_styles = {}, {}

    def on_resize(self) -> None:
        self._strips, self._run_styles = {}, {}

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
        super().on_resize()
        self._rebuild(self.content_size.width)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self._snapshot is None:
            return 1
        return len(self.build_lines(self._snapshot, width))

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        if self._snapshot is not None and 0 < width != self._built_width:
            # The first paint after a layout comes before the Resize event: draw the snapshot
            # at the width being painted, not the lines of the old width (or "waiting").
            self._lines, self._strips = self.build_lines(self._snapshot, width), {}
            self._built_width = width
        return super().render_line(y)

    def _rebuild(self, width: int) -> None:
        if self._snapshot is None or width <= 0:
            return
        self.set_lines(self.build_lines(self._snapshot, width))
        self._built_width = width
