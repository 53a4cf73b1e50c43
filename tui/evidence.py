"""Point at the proof: the panels holding the primary finding's evidence get a coloured border.

Toggling a CSS class restyles the widget, so the marks are diffed against what is already on
screen and a class changes only when the verdict's evidence moves, never on every tick.
"""

from __future__ import annotations

from collections.abc import Mapping

from textual.css.query import NoMatches
from textual.dom import DOMNode

from traintop.diagnosis.model import PANELS, Verdict

# Severity -> the class that colours the panel border (styled in styles/verdict.tcss).
EVIDENCE_CLASSES: dict[str, str] = {
    "info": "-evidence-info",
    "warning": "-evidence",
    "error": "-evidence-error",
}


def evidence_marks(verdict: Verdict | None) -> dict[str, str]:
    """Panel id -> evidence class for the primary finding; nothing for healthy or unknown."""
    if verdict is None:
        return {}
    primary = verdict.primary
    css_class = EVIDENCE_CLASSES.get(primary.severity)
    if css_class is None or primary.bottleneck == "unknown":
        return {}
    return {item.panel: css_class for item in primary.evidence if item.panel in PANELS}


class EvidenceHighlight:
    """Remembers which panels are marked so that only the differences touch the DOM."""

    def __init__(self) -> None:
        self.marks: dict[str, str] = {}

    def apply(self, root: DOMNode, marks: Mapping[str, str]) -> int:
        """Bring the panels under ``root`` to ``marks``; returns how many classes changed."""
        changes = 0
        for panel_id in set(self.marks) | set(marks):
            old, new = self.marks.get(panel_id), marks.get(panel_id)
            if old == new:
                continue
            try:
                panel = root.query_one(f"#{panel_id}")
            except NoMatches:
                continue
            if old is not None:
                panel.remove_class(old)
            if new is not None:
                panel.add_class(new)
            changes += 1
        self.marks = dict(marks)
        return changes
