"""Glue between the verdicts the pipeline delivers and the screen: banner, evidence marks,
details screen.

The pipeline judges every snapshot on the sampler thread and the app carries the verdict to
the UI thread with the snapshot itself; there :meth:`VerdictView.receive` decides what is
shown, inside the same ``batch_update()`` as the panels, so one tick is one frame.  While the
display is paused the newest verdict is kept but not shown, so the banner freezes
with the panels and catches up on resume.  The banner is looked up once at start:
``App.query`` only sees the active screen, and the main screen must keep updating its marks
even when the details screen covers it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import App

from traintop.tui.evidence import EvidenceHighlight, evidence_marks
from traintop.tui.widgets.verdict import VerdictBanner

if TYPE_CHECKING:
    from traintop.diagnosis.verdict_runner import VerdictUpdate
    from traintop.tui.screens.details import DetailsScreen


class VerdictView:
    """Shows the verdicts of one app: the newest received, and the one on screen."""

    def __init__(self, app: App) -> None:
        self._app = app
        self.latest: VerdictUpdate | None = None
        self.shown: VerdictUpdate | None = None
        self._banner: VerdictBanner | None = None
        self._highlight = EvidenceHighlight()
        self._details: DetailsScreen | None = None  # imported at the first `d`: none at start

    def start(self) -> None:
        self._banner = self._app.query_one(VerdictBanner)

    def receive(self, update: VerdictUpdate, *, paused: bool) -> None:
        self.latest = update
        if not paused:
            self.show(update)

    def resume(self) -> None:
        """The display was unpaused: show the newest verdict if it is not on screen yet."""
        if self.latest is not None and self.latest is not self.shown:
            self.show(self.latest)

    def show(self, update: VerdictUpdate) -> None:
        self.shown = update
        if self._banner is not None:
            self._banner.show(update.verdict)
            self._highlight.apply(self._banner.screen, evidence_marks(update.verdict))
        if self._details is not None and self._app.screen is self._details:
            self._details.show(update)

    def open_details(self) -> None:
        if self._details is None or self._app.screen is not self._details:
            from traintop.tui.screens.details import DetailsScreen

            self._details = DetailsScreen(self.shown)
            self._app.push_screen(self._details)
