"""The base of every text panel: render from the latest snapshot, refresh only on change.

Panels are redrawn once per tick, so the cost that matters is Textual repainting them.  A panel
builds its Content, compares it with what is on screen and refreshes only when it differs; it
asks for a new layout only when its number of lines changes.
"""

from __future__ import annotations

from typing import ClassVar

from textual.content import Content
from textual.geometry import Size
from textual.widget import Widget

from collectors.snapshot import Snapshot


class Panel(Widget):
    """A bordered panel whose title shows its toggle key ("1 GPU")."""

    KEY: ClassVar[str] = ""
    TITLE: ClassVar[str] = ""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="panel")
        self.border_title = f"{self.KEY} {self.TITLE}"
        self._snapshot: Snapshot | None = None
        self._content = Content("waiting for the first sample…")

    def record(self, snapshot: Snapshot) -> None:
        """Keep history from every snapshot, also while the display is paused."""

    def show(self, snapshot: Snapshot) -> None:
        """Display ``snapshot``; repaints only if the text or its line count changed."""
        self._snapshot = snapshot
        self._rebuild(self.content_size.width)

    def build(self, snapshot: Snapshot, width: int) -> Content:
        """The panel's text for ``snapshot`` at ``width`` cells; subclasses implement it."""
        raise NotImplementedError

    def render(self) -> Content:
        return self._content

    def on_resize(self) -> None:
        self._rebuild(self.content_size.width)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self._snapshot is None:
            return 1
        return len(self.build(self._snapshot, width).split("\n", allow_blank=True))

    def _rebuild(self, width: int) -> None:
        if self._snapshot is None or width <= 0:
            return
        content = self.build(self._snapshot, width)
        if content == self._content and content.spans == self._content.spans:
            return
        grew = content.plain.count("\n") != self._content.plain.count("\n")
        self._content = content
        self.refresh(layout=grew)
