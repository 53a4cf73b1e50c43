"""The verdict banner under the header: the bottleneck, its proof and how sure we are.

One line ("◆ DATA LOADING (CPU) — data wait 62 % of step; … · conf 90 % · for 12 s · d: details"),
two at wide sizes (the summary, the first remedy and what else holds).  It is coloured by a
severity class (-ok, -info, -warning, -error, -unknown) set only when the severity changes, and
it repaints only when its text does; verdicts arrive already stabilised, so it cannot flicker.
"""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding
from textual.content import Content
from textual.events import Click
from textual.geometry import Size
from textual.strip import Strip

from traintop.diagnosis.model import Finding, Verdict
from traintop.tui.widgets.panel import LineWidget
from traintop.views.verdict_text import (
    evidence_line,
    headline,
    label,
    lead,
    live_hang,
    marker,
    other_jobs_fact,
    tone,
    tone_style,
    try_line,
    verdict_facts,
)

WAITING = Finding("unknown", 0.0, "info", "collecting data")  # before the first verdict
DETAILS_HINT = "d: details"
SEPARATOR = " · "
MIN_EVIDENCE = 32  # keep a first sentence up to this long whole before keeping facts


class VerdictBanner(LineWidget, can_focus=True):
    """Shows the verdict it is given; Enter or a click opens the details screen."""

    # narrower than Textual's own (mutable) type for it: CONTRIBUTING.md, Types
    BINDINGS: ClassVar[list[Binding]] = [Binding("enter", "app.details", "Details", show=False)]  # pyright: ignore[reportIncompatibleVariableOverride]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="-unknown")
        self.verdict: Verdict | None = None
        self._tone = "unknown"
        self._built = Size(0, 0)  # the size the lines were made for

    def show(self, verdict: Verdict) -> None:
        """Display ``verdict``; restyles only on a severity change, repaints only on new text."""
        self.verdict = verdict
        self._set_tone(tone(verdict.primary))
        self._rebuild()

    def on_mount(self) -> None:
        self._rebuild()

    def on_resize(self) -> None:
        if self.content_size != self._built:  # not at the size painted (see Panel)
            self._rebuild()

    def render_line(self, y: int) -> Strip:
        size = self.content_size
        if size != self._built and size.width > 0:
            # The first paint after a layout comes before the Resize event (see Panel): the
            # lines of the size being painted, not a relayout and a second paint for them.
            self._lines, self._strips, self._built = self._for(size), {}, size
        return super().render_line(y)

    async def on_click(self, event: Click) -> None:
        event.stop()
        await self.run_action("app.details")

    def _set_tone(self, new: str) -> None:
        if new != self._tone:
            self.remove_class(f"-{self._tone}")
            self.add_class(f"-{new}")
            self._tone = new

    def _rebuild(self) -> None:
        size = self.content_size
        if size.width > 0:
            self._built = size
            self.set_lines(self._for(size))

    def _for(self, size: Size) -> list[Content]:
        return banner_lines(self.verdict, size.width, two_lines=size.height >= 2)


def banner_lines(verdict: Verdict | None, width: int, *, two_lines: bool = False) -> list[Content]:
    """The banner's lines for ``verdict`` (None: none judged yet) fitted to ``width``."""
    if verdict is not None and live_hang(verdict):
        return hang_banner(verdict, width, two_lines=two_lines)
    head = headline(verdict) if verdict else label("unknown")
    first = banner_line(verdict.primary if verdict else WAITING, _facts(verdict), width, head)
    if not two_lines or verdict is None:
        return [first]
    return [first, detail_line(verdict, width)]


def _facts(verdict: Verdict | None) -> list[str]:
    return [*(verdict_facts(verdict) if verdict else []), DETAILS_HINT]


def banner_line(finding: Finding, facts: list[str], width: int, name: str | None = None) -> Content:
    """Head, evidence, facts; trailing facts give way until the first evidence sentence fits
    (up to ``MIN_EVIDENCE`` cells), then later sentences are left out or the first is cut."""
    head = f"{marker(finding)} {name or label(finding.bottleneck)}"
    first = lead(finding)[0]
    while facts and _room(width, head, facts) < min(len(first), MIN_EVIDENCE):
        facts = facts[:-1]
    room = _room(width, head, facts)
    parts: list[tuple[str, str] | str] = [(head, f"bold {tone_style(finding)}")]
    if room > 0:
        parts += [(" — ", "dim"), evidence_line(finding, room)]
    if facts:
        parts.append((SEPARATOR + SEPARATOR.join(facts), "dim"))
    return Content.assemble(*parts).truncate(width, ellipsis=True)


def _room(width: int, head: str, facts: list[str]) -> int:
    """Cells left for the evidence after the head, the dash and the facts."""
    tail = len(SEPARATOR + SEPARATOR.join(facts)) if facts else 0
    return width - len(head) - 3 - tail


def hang_banner(verdict: Verdict, width: int, *, two_lines: bool = False) -> list[Content]:
    """A stopped job says each thing once: its one line (who, where, for how long: the
    finding's summary) with the other jobs and the hint where room is left, then, on a wide
    screen, the case in a sentence and the first remedy."""
    primary = verdict.primary
    head = f"{marker(primary)} {primary.summary}"
    facts = [f for f in (other_jobs_fact(verdict), DETAILS_HINT) if f]
    while facts and len(head) + len(SEPARATOR + SEPARATOR.join(facts)) > width:
        facts = facts[:-1]
    parts: list[tuple[str, str] | str] = [(head, f"bold {tone_style(primary)}")]
    if facts:
        parts.append((SEPARATOR + SEPARATOR.join(facts), "dim"))
    first = Content.assemble(*parts).truncate(width, ellipsis=True)
    if not two_lines:
        return [first]
    case = primary.evidence[0].text if primary.evidence else ""
    second: list[tuple[str, str] | str] = ["  ", case]
    first_fix = try_line(primary)
    if first_fix:
        second += [("  try: ", "dim"), (first_fix, "italic")]
    return [first, Content.assemble(*second).truncate(width, ellipsis=True)]


def detail_line(verdict: Verdict, width: int) -> Content:
    """The wide-screen second line: the summary, the best remedy, what else holds."""
    primary = verdict.primary
    parts: list[tuple[str, str] | str] = ["  ", primary.summary]
    first_fix = try_line(primary)
    if first_fix and primary.bottleneck != "unknown":
        parts += [("  try: ", "dim"), (first_fix, "italic")]
    if verdict.also:
        others = ", ".join(label(f.bottleneck).lower() for f in verdict.also)
        parts += [("  also: ", "dim"), others]
    return Content.assemble(*parts).truncate(width, ellipsis=True)
