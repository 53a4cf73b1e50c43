"""A cheap way to build one styled line: append text runs, get one ``Content`` at the end.

Panels rebuild their lines every tick, and ``Content.assemble``/``join`` make a ``Content`` per
piece (each strips control codes and measures cells), so a GPU row of twenty pieces cost about
twenty of them.  A ``Line`` only appends strings and records a span per styled run; the one
``Content`` it makes has sequential, non-overlapping spans, which is also what lets
:class:`~traintop.tui.widgets.panel.LineWidget` draw it without ``Content.render``'s style stack.
"""

from __future__ import annotations

from textual.content import Content, Span
from textual.style import Style


class Line:
    """Text runs and their styles, in order; ``content()`` makes the finished line."""

    __slots__ = ("_length", "_parts", "_spans")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._spans: list[Span] = []
        self._length = 0

    def __len__(self) -> int:
        """Characters so far (one cell each: panels draw only narrow characters)."""
        return self._length

    def add(self, text: str, style: str | Style = "") -> Line:
        """Append ``text``, styled with ``style`` (a Textual style string) when given."""
        if text:
            start, end = self._length, self._length + len(text)
            spans = self._spans
            if style and spans and spans[-1].end == start and spans[-1].style == style:
                spans[-1] = Span(spans[-1].start, end, style)  # one run, one segment on screen
            elif style:
                spans.append(Span(start, end, style))
            self._parts.append(text)
            self._length = end
        return self

    def add_content(self, content: Content) -> Line:
        """Append ``content`` in its styles; its spans must follow one another, as those of
        ``Content.styled`` and ``Content.assemble`` do."""
        text, pos = content.plain, 0
        for span in content.spans:
            self.add(text[pos : span.start]).add(text[span.start : span.end], span.style)
            pos = span.end
        return self.add(text[pos:])

    def content(self) -> Content:
        return line_content("".join(self._parts), self._spans)


def line_content(text: str, spans: list[Span]) -> Content:
    """``Content(text, spans)``, stripping control codes only when there can be any.

    Content strips them with str.translate, slow on non-ASCII text (bars, sparklines) and
    costlier than building a process row; a printable line has none to strip.
    """
    return Content(text, spans, strip_control_codes=not text.isprintable())
