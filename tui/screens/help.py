"""The help screen (?): every key the app binds, read from its BINDINGS so it cannot drift."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from traintop.views.job_groups import ENDED_COLLAPSE_S

NAVIGATION = (
    "↑↓ PgUp PgDn Home End: move in the focused table (Tab or j moves between them)\n"
    "jobs table: Enter steps into the job's ranks, Escape steps back; jobs that ended over\n"
    f"{ENDED_COLLAPSE_S:.0f} s ago fold into one row, e shows or hides them"
)


class HelpScreen(ModalScreen[None]):
    """A centred list of keys and what they do; escape, q or ? closes it."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
        Binding("question_mark", "dismiss", "Close", show=False),
    ]

    def __init__(self, bindings: list[Binding], navigation: str = NAVIGATION) -> None:
        super().__init__()
        self._keys = bindings
        self._navigation = navigation  # another app's tables (the fleet view) move differently

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(Content.styled("traintop keys", "bold $accent"), id="help-title")
            yield Static(help_text(self._keys), id="help-keys")
            yield Static(Content.styled(self._navigation, "dim"), id="help-navigation")
            yield Static(Content.styled("escape closes this screen", "dim"))


def help_text(bindings: list[Binding]) -> Content:
    """One line per binding: the key as the footer shows it, then its description."""
    lines = []
    for binding in bindings:
        keys = binding.key_display or binding.key.replace("question_mark", "?")
        keys = keys.replace("plus", "+").replace("minus", "-")
        lines.append(Content.assemble((f"{keys:>8}", "bold $accent"), "  ", binding.description))
    return Content("\n").join(lines)
