"""A list whose items wrap under their own text, not under the bullet or number.

Remedies and evidence are sentences that wrap on an 80-column terminal; with plain wrapping the
second line starts under "1." and the numbers stop standing out.  Textual has no hanging indent,
so this widget wraps each item's body itself at the width it is given.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.content import Content
from textual.geometry import Size
from textual.widget import Widget

Item = tuple[Content | str, Content | str]  # (marker such as "1. " or "• ", body)


class HangingList(Widget):
    """Items as ``marker body``; continuation lines are indented by the marker's width."""

    DEFAULT_CSS = "HangingList { height: auto; }"

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._items: tuple[Item, ...] = ()

    def set_items(self, items: Sequence[Item]) -> None:
        """Show ``items``; lays out again only when they changed."""
        items = tuple(items)
        if items != self._items:
            self._items = items
            self.refresh(layout=True)

    def render(self) -> Content:
        return Content("\n").join(hanging_lines(self._items, self.content_size.width or 80))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(hanging_lines(self._items, width))


def hanging_lines(items: Sequence[Item], width: int) -> list[Content]:
    """Every item wrapped to ``width`` cells with a hanging indent under its marker."""
    lines: list[Content] = []
    for marker, body in items:
        marker = Content(marker) if isinstance(marker, str) else marker
        body = Content(body) if isinstance(body, str) else body
        indent = marker.cell_length
        wrapped = body.wrap(max(width - indent, 8)) or [Content("")]
        lines.append(marker + wrapped[0])
        lines += [Content(" " * indent) + line for line in wrapped[1:]]
    return lines
