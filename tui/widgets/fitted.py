"""A line widget that asks for the lines it has and draws the lines it gets.

The attach-mode panels hold tables that can be far longer than the screen (64 ranks, a sweep
of 32 runs).  Such a widget reports its natural height, the stylesheet caps it with
``max-height``, and it then builds exactly as many lines as it was given, scrolling its tables
around their cursors.  So a long table never pushes the CPU and process panels off the screen,
and only the rows on screen are ever built.
"""

from __future__ import annotations

from textual.content import Content
from textual.geometry import Size
from textual.strip import Strip

from traintop.tui.widgets.panel import LineWidget

UNSIZED_WIDTH = 200  # the width to measure with before the first layout


class FittedLines(LineWidget):
    """Subclasses say how many lines they have and build the lines that fit."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._natural = 1
        self._built = Size(0, 0)

    def natural_height(self, width: int) -> int:
        """Lines the widget would draw at ``width`` with unlimited height."""
        raise NotImplementedError

    def build(self, width: int, height: int) -> list[Content]:
        """Exactly the lines to show in ``width`` x ``height`` cells."""
        raise NotImplementedError

    def redraw(self) -> None:
        """Bring the screen to the current state: a new layout only if the natural height
        changed, otherwise a repaint of the lines whose text changed."""
        width = self.content_size.width
        natural = self.natural_height(width if width > 0 else UNSIZED_WIDTH)
        if natural != self._natural:
            self._natural = natural
            self.refresh(layout=True)
        if width > 0 and self.content_size.height > 0:
            self.set_lines(self.build(width, self.content_size.height))
            self._built = self.content_size

    def render_line(self, y: int) -> Strip:
        size = self.content_size
        if size != self._built and size.width > 0 and size.height > 0:
            # The first paint after a layout comes before the Resize event (see Panel).
            self._lines, self._strips = self.build(size.width, size.height), {}
            self._built = size
        return super().render_line(y)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        self._natural = self.natural_height(width)
        return self._natural

    def on_resize(self) -> None:
        if self.content_size != self._built:  # not at the size painted (see Panel)
            self.redraw()

    def on_focus(self) -> None:
        """How the cursor row is drawn depends on whether the table has the keys."""
        self.redraw()

    def on_blur(self) -> None:
        self.redraw()
