"""Panel rows drawn inside a cached frame: Textual's styles cache without its per-row rebuild.

A line widget repaints only the rows that changed, but Textual draws each of them from scratch:
border, padding, colours and effects looked up and built again around the content, about
60 µs a row, more than the row itself.  The frame around a content row depends only on the
styles and sizes the styles cache is given, so it can be taken once and kept.
"""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style as RichStyle
from textual._styles_cache import StylesCache
from textual.css.styles import StylesBase
from textual.geometry import Size
from textual.strip import Strip

Frame = tuple[list[Segment], list[Segment]] | None  # segments left and right of a content row


class FramedRows(StylesCache):
    """Textual's styles cache, drawing a content row as a cached frame around the row.

    The frame is taken from Textual's own render of a row whose content is a sentinel segment,
    and kept while the styles and sizes stay the same.  It is used only when the sentinel came
    through untouched (no tint, opacity, hatch or outline changed content cells): then
    Textual's row is exactly the frame's left part, the content, and its right part.
    """

    def __init__(self) -> None:
        super().__init__()
        self._frame_key: tuple | None = None
        self._frame: Frame = None

    def render_line(  # type: ignore[override]
        self, styles: StylesBase, y: int, size: Size, content_size: Size, *rest: Any
    ) -> Strip:
        """A content row around its frame; any other row as Textual draws it."""
        row = y - styles.gutter.top
        if 0 <= row < content_size.height and y < size.height - styles.gutter.bottom:
            frame = self._frame_for(styles, size, content_size, rest)
            if frame is not None:
                content = rest[3](row)
                if content is not None and content.cell_length == content_size.width:
                    left, right = frame
                    return Strip([*left, *content, *right], size.width)
        return super().render_line(styles, y, size, content_size, *rest)

    def _frame_for(self, styles: StylesBase, size: Size, content_size: Size, rest: tuple) -> Frame:
        """The frame for these styles and sizes (None where content rows are not framed
        plainly); ``rest`` are the remaining arguments of ``render_line``."""
        padding, base_background, background, _, _, _, opacity, theme, native = rest
        cache_key = styles._cache_key  # pyright: ignore[reportAttributeAccessIssue]  (a widget's RenderStyles)
        key = (cache_key, size, content_size, padding, base_background, background,
               opacity, id(theme), native)  # fmt: skip
        if key != self._frame_key:
            self._frame_key, self._frame = key, self._capture(styles, size, content_size, rest)
        return self._frame

    def _capture(self, styles: StylesBase, size: Size, content_size: Size, rest: tuple) -> Frame:
        """Textual's first content row around a sentinel, split at it (an outline draws over
        the top and bottom rows, so it keeps every row Textual's)."""
        if any(edge for edge, _ in styles.outline):
            return None
        sentinel = Segment(" " * content_size.width, RichStyle(meta={"frame": id(self)}))
        padding, base_background, background, _, *labels = rest
        strip = super().render_line(
            styles, styles.gutter.top, size, content_size, padding, base_background,
            background, lambda _: Strip([sentinel], content_size.width), *labels,
        )  # fmt: skip
        segments = list(strip)
        found = [i for i, segment in enumerate(segments) if segment is sentinel]
        if len(found) != 1:
            return None
        return segments[: found[0]], segments[found[0] + 1 :]
