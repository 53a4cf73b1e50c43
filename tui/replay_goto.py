"""Replay's `g`: one input line asking where to go."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

PROMPT = "go to: 13:05 or 13:05:30 (clock), +10m (from the start), -5m (from the end)"


class GotoScreen(ModalScreen[str | None]):
    """Dismissed with the text typed (enter) or None (escape)."""

    DEFAULT_CSS = """
    GotoScreen { align: center middle; }
    GotoScreen > Vertical { width: 80; height: auto; border: round $accent; background: $panel; }
    """
    BINDINGS: ClassVar[list[Binding]] = [Binding("escape", "cancel", "Cancel")]
    AUTO_FOCUS = "#goto-input"  # the app sets none: typing must land in the input at once

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(PROMPT)
            yield Input(placeholder="+10m", id="goto-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
