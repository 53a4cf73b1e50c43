"""The job-card machinery the Training and DataLoader panels share.

Both attach-mode panels get the job tuple every tick and must cost next to nothing: a panel
drops a tuple equal to the last one, and each card redraws only when its own view changed,
asking for a new layout only when its number of lines did.  Cards lay their text out for the
width they are given, wrapping between label/value chips, so 80 columns stay readable.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.geometry import Size
from textual.style import Style
from textual.widget import Widget
from textual.widgets import Static

from collectors.snapshot import JobSnapshot
from tui.format import NA

EMPTY_MESSAGE = (
    "no training job attached — run `traintop run -- python train.py` or use traintop.attach()"
)


def fmt_number(value: float | None) -> str:
    """Rates with three significant digits: 3.21, 41.2, 1,644."""
    if value is None:
        return NA
    if abs(value) < 10:
        return f"{value:.2f}"
    if abs(value) < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def fmt_seconds(seconds: float | None) -> str:
    """Step and wait times span microseconds to minutes: pick the unit that fits."""
    if seconds is None:
        return NA
    if abs(seconds) < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if abs(seconds) < 1:
        return f"{fmt_number(seconds * 1e3)} ms"
    return f"{fmt_number(seconds)} s"


def fmt_share(share: float | None) -> str:
    """A 0..1 share as a whole percent."""
    return NA if share is None else f"{share * 100:.0f}%"


LONG_PHASE_STEPS = 5.0  # a live job's current phase is shown once it outlasts 5 p50 steps


def fmt_age(seconds: float | None) -> str | None:
    """How long since the last step, in words a stalled badge can hold: "34 s", "3 min"."""
    if seconds is None:
        return None
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def long_live_phase(job: JobSnapshot) -> str | None:
    """ "in backward for 43 s" when worth a look: always for a stalled job (it names where the
    hang is), for a live one only once the phase outlasts ``LONG_PHASE_STEPS`` p50 steps.
    """
    phase, seconds = job.live_phase, job.live_phase_s
    if phase is None or seconds is None or job.state not in ("live", "stalled"):
        return None
    p50 = job.step_time_p50_s
    if job.state == "live" and (p50 is None or seconds <= LONG_PHASE_STEPS * p50):
        return None
    return f"in {phase} for {fmt_age(seconds)}"


def flow(chips: Iterable[Content], width: int, gap: int = 2) -> list[Content]:
    """Lay chips out left to right and wrap between chips, never inside one."""
    lines: list[Content] = []
    line = Content()
    for chip in chips:
        if line.cell_length and line.cell_length + gap + chip.cell_length > width:
            lines.append(line)
            line = Content()
        line = line + " " * gap + chip if line.cell_length else chip
    if line.cell_length:
        lines.append(line)
    return lines


def order_jobs(jobs: Sequence[JobSnapshot], focus_pid: int | None) -> list[JobSnapshot]:
    """Attach mode shows only the focused job's run (all its ranks), the focused pid first.

    An unknown pid shows every job, so a stale focus never blanks the panel.
    """
    focus = next((job for job in jobs if job.pid == focus_pid), None)
    if focus is None:
        return list(jobs)
    same_run = [
        job for job in jobs if job is not focus and job.world_size > 1 and job.name == focus.name
    ]
    return [focus, *same_run]


class JobCard(Widget):
    """A block of text for one job, laid out for its width and cached until the view changes."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "job--name",
        "job--label",
        "job--value",
        "job--header",
        "job--warning",
        "job--error",
    }

    def __init__(self) -> None:
        super().__init__()
        self._view: object = None
        self._lines: list[Content] = []
        self._width = -1
        self._styles: dict[str, Style] = {}

    def show(self, view: object) -> None:
        """Take this tick's view; repaint only if it differs from the one on screen."""
        if view == self._view:
            return
        self._view = view
        before = len(self._lines)
        self._width = -1
        width = self.content_size.width
        after = len(self._lines_for(width)) if width > 0 else before + 1
        self.refresh(layout=after != before)

    def build(self, view: object, width: int) -> list[Content]:
        """The card's lines for ``view`` at ``width`` cells; each card type implements it."""
        raise NotImplementedError

    def render(self) -> Content:
        return Content("\n").join(self._lines_for(self.content_size.width))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines_for(width))

    def notify_style_update(self) -> None:
        """A theme change re-resolves $variables, so cached lines carry stale colours."""
        super().notify_style_update()
        self._styles.clear()
        self._width = -1

    def style(self, component: str) -> Style:
        """The colours training.tcss gives ``component`` (cached: a card asks hundreds of times)."""
        if (style := self._styles.get(component)) is None:
            style = self._styles[component] = self.get_visual_style(component, partial=True)
        return style

    def chip(self, label: str, value: object) -> Content:
        """A muted label followed by its value: "steps/s 3.21"."""
        return Content.assemble(
            (f"{label} ", self.style("job--label")), (str(value), self.style("job--value"))
        )

    def _lines_for(self, width: int) -> list[Content]:
        if width != self._width:
            ready = self._view is not None and width > 0
            self._lines = self.build(self._view, width) if ready else []
            self._width = width
        return self._lines


class JobPanel(VerticalScroll):
    """Keeps one card per key that ``views`` returns, mounting and removing only on change."""

    TITLE: ClassVar[str] = ""
    card_type: ClassVar[type[JobCard]] = JobCard

    def __init__(self, *, focus_pid: int | None = None, id: str | None = None) -> None:
        super().__init__(id=id, classes="panel job-panel")
        self.border_title = self.TITLE
        self._focus_pid = focus_pid
        self._jobs: tuple[JobSnapshot, ...] | None = None
        self._cards: dict[object, JobCard] = {}

    @property
    def focus_pid(self) -> int | None:
        """The job attach mode follows; None shows every job."""
        return self._focus_pid

    @focus_pid.setter
    def focus_pid(self, pid: int | None) -> None:
        self._focus_pid = pid
        jobs, self._jobs = self._jobs, None
        if jobs is not None:
            self.update_jobs(jobs)

    def compose(self) -> ComposeResult:
        yield Static(EMPTY_MESSAGE, classes="job-empty", markup=False)

    def update_jobs(self, jobs: tuple[JobSnapshot, ...]) -> None:
        """Called once per tick by the app; an unchanged tuple costs one comparison."""
        if jobs == self._jobs:
            return
        self._jobs = jobs
        if self.is_mounted:
            self._show_jobs()

    def on_mount(self) -> None:
        """Jobs handed over before the panel was mounted are shown now."""
        self._show_jobs()

    def views(self, jobs: Sequence[JobSnapshot]) -> dict[object, object]:
        """One view per card, keyed so that a job keeps its card from tick to tick."""
        raise NotImplementedError

    def _show_jobs(self) -> None:
        if self._jobs is not None:
            self._sync(self.views(order_jobs(self._jobs, self._focus_pid)))

    def _sync(self, views: dict[object, object]) -> None:
        for key in self._cards.keys() - views.keys():
            self._cards.pop(key).remove()
        added = {key: self.card_type() for key in views if key not in self._cards}
        self._cards.update(added)
        if added:
            self.mount_all(added.values())
        if list(self._cards) != list(views):
            self._cards = {key: self._cards[key] for key in views}
            position = {id(card): index for index, card in enumerate(self._cards.values())}
            self.sort_children(key=lambda child: position.get(id(child), -1))
        for key, view in views.items():
            self._cards[key].show(view)
        self.query_one(".job-empty").display = not views
