"""The verdict details screen (d, or Enter/click on the banner): why traintop says what it says.

The banner has room for one sentence; this screen shows the whole case: the primary finding
with its confidence, mode and age, every piece of evidence with its measured number, the
remedies in the order the engine ranks them, the other findings that hold, and how the verdict
and the key metrics moved over the recent window, so a fix can be seen working.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Static

from traintop.diagnosis.api import Finding, JobVerdict, Verdict
from traintop.diagnosis.gain_text import gain_words, has_figure, remedy_line
from traintop.diagnosis.run_life import short_ending
from traintop.diagnosis.stack_text import stack_lines
from traintop.diagnosis.verdict_history import METRICS, Metric, VerdictPoint, runs, stats
from traintop.diagnosis.verdict_runner import VerdictUpdate
from traintop.tui.widgets.hanging_list import HangingList, Item
from traintop.views.format import sparkline
from traintop.views.hang_text import every_stack
from traintop.views.verdict_text import fmt_since, focus_job, headline, label, marker, tone_style

STAT_WIDTH = 8
SHARE_SHOWN = 0.02  # claims below this are rankings (healthy compute), not time
LABEL_WIDTH = 11
SECTIONS = (
    ("evidence", "Evidence"),
    ("remedies", "Remedies, most effective first"),
    ("against", "Against the run before"),
    ("stacks", "Stacks, innermost frame last"),
    ("also", "Also holds"),
    ("jobs", "Jobs on this box"),
)


class DetailsScreen(ModalScreen[None]):
    """A scrollable case file for the shown verdict; the app refreshes it while it is open."""

    AUTO_FOCUS = "#details-body"
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
        Binding("d", "dismiss", "Close", show=False),
        Binding("p", "app.toggle_pause", "Pause"),
    ]

    def __init__(self, update: VerdictUpdate | None) -> None:
        super().__init__()
        self._update = update

    def compose(self) -> ComposeResult:
        with Vertical(id="details-box"):
            yield Static(id="details-title")
            with VerticalScroll(id="details-body"):
                yield Static(id="details-finding")
                for key, heading in SECTIONS:
                    yield Static(heading, classes="details-heading", id=f"details-{key}-heading")
                    yield HangingList(classes="details-list", id=f"details-{key}")
                yield HistoryView(id="details-history")
            yield Static(Content.styled("escape closes · ↑↓ scroll", "dim"), id="details-hint")

    def on_mount(self) -> None:
        self.show(self._update)

    def show(self, update: VerdictUpdate | None) -> None:
        """Display ``update`` (None: nothing diagnosed yet)."""
        self._update = update
        if update is None:
            self.query_one("#details-title", Static).update("no verdict yet: waiting for samples")
            return
        verdict = update.verdict
        self.query_one("#details-title", Static).update(title_text(verdict))
        self.query_one("#details-finding", Static).update(finding_text(verdict))
        self.query_one("#details-evidence", HangingList).set_items(evidence_items(verdict.primary))
        self.query_one("#details-remedies", HangingList).set_items(remedy_items(verdict.primary))
        against = [("• ", line) for line in update.against]
        self.query_one("#details-against", HangingList).set_items(against)
        for key in ("#details-against", "#details-against-heading"):
            self.query_one(key).display = bool(against)
        stacks = stack_items(verdict)
        self.query_one("#details-stacks", HangingList).set_items(stacks)
        for key in ("#details-stacks", "#details-stacks-heading"):
            self.query_one(key).display = bool(stacks)
        self.query_one("#details-also", HangingList).set_items(also_items(verdict.also))
        self.query_one("#details-jobs", HangingList).set_items(job_items(verdict))
        self.query_one(HistoryView).history = update.history


def _lines(lines: Sequence[Content | str]) -> Content:
    return Content("\n").join(
        line if isinstance(line, Content) else Content(line) for line in lines
    )


def _section(title: str, lines: Sequence[Content | str]) -> Content:
    return Content("\n").join([Content.styled(title, "bold $accent"), _lines(lines)])


def title_text(verdict: Verdict) -> Content:
    primary = verdict.primary
    head = f"{marker(primary)} {headline(verdict)}"
    return Content.styled(head, f"bold {tone_style(primary)}")


def finding_text(verdict: Verdict) -> Content:
    """The summary, then one line of facts: severity, confidence, mode, age, window."""
    primary, job = verdict.primary, focus_job(verdict)
    facts = [
        primary.severity,
        f"confidence {primary.confidence * 100:.0f} %",
        f"{verdict.mode} mode",
        f"held for {fmt_since(verdict.since_s)}",
        f"window {verdict.window_s:.0f} s",
    ]
    if job is not None:
        facts.insert(0, job_name(job))
    return _lines([Content(primary.summary), Content.styled(" · ".join(facts), "dim")])


def job_name(job: JobVerdict) -> str:
    """``train.py (2 ranks)``: who a verdict is about."""
    count = len(job.ranks)
    ranks = f" ({count} ranks)" if count > 1 else f" (pid {job.ranks[0].pid})"
    return f"{job.name}{ranks}"


def job_items(verdict: Verdict) -> list[Item]:
    """Every job's verdict: live ones now (worst first), ended ones as their final word."""
    if not verdict.per_job:
        return [("", "no training job attached")]
    return [_job_item(job, job.job_id == verdict.job_id) for job in verdict.per_job]


def _job_item(job: JobVerdict, focused: bool) -> Item:
    f = job.primary
    style = f"bold {tone_style(f)}" if job.live else "dim"
    name = label(f.bottleneck) if job.live else job.state
    parts = [(name, style), f"  {job_name(job)}", ("  (shown above)", "dim") if focused else ""]
    detail = f.summary if not job.live or f.bottleneck == "unknown" else _first_evidence(f)
    return (Content.styled(f"{marker(f)} ", style), Content.assemble(*parts, f" — {detail}"))


def _first_evidence(f: Finding) -> str:
    return f.evidence[0].text if f.evidence else f.summary


def evidence_items(finding: Finding) -> list[Item]:
    """Each measured fact with the panel that shows it (its border is highlighted there)."""
    if not finding.evidence:
        return [("", "none measured yet")]
    return [
        ("• ", Content.assemble(item.text, (f"   [{item.panel} panel]", "dim")))
        for item in finding.evidence
    ]


def stack_items(verdict: Verdict) -> list[Item]:
    """Each rank of a stopped job with its whole stack, and the stack an ended job ended in
    (its exception's traceback, the frames a signal stopped it in): for the job the verdict is
    about, else for every ended job on the box; none for jobs that step or finished."""
    job = focus_job(verdict)
    stacks = every_stack(job.hang) if job is not None and job.hang is not None else []
    ended = (job,) if job is not None else [j for j in verdict.per_job if not j.live]
    for each in ended:
        stacks += _ending_stack(each, named=job is None)
    items: list[Item] = []
    for heading, lines in stacks:
        items.append(("• ", Content.styled(heading, "bold")))
        items += [("    ", Content.styled(line, _stack_style(line))) for line in lines]
    return items


def _ending_stack(job: JobVerdict, named: bool) -> list[tuple[str, list[str]]]:
    """(heading, lines) of the stack ``job`` ended in; ``named``: the heading says which job."""
    ending = job.ending
    if ending is None or not ending.frames or ending.kind == "finished":
        return []
    heading = f"where it ended: {short_ending(ending)}"
    return [(f"{job.name}: {heading}" if named else heading, stack_lines(ending.frames))]


def _stack_style(line: str) -> str:
    """Source lines (indented) dim under their frame lines."""
    return "dim" if line.startswith(" ") else ""


def remedy_items(finding: Finding) -> list[Item]:
    """Each remedy, most it buys first: its line (the change and its predicted gain, one
    line at 80 columns), then, dim beneath, the whole advice and the prediction's range and
    reason."""
    if not finding.remedies:
        return [("", "nothing to change")]
    items: list[Item] = []
    for rank, remedy in enumerate(finding.remedies, 1):
        marker = f"{rank}. "
        gain = finding.gain_of(remedy)
        if gain is None:
            items.append((marker, remedy))
            continue
        line = remedy_line(gain) if has_figure(gain) else remedy
        items.append((marker, Content.styled(line, "bold")))
        more = [remedy] if line != remedy and gain.change else []
        more.append(gain_words(gain))
        items.append((" " * len(marker), Content.styled(" · ".join(more), "dim")))
    return items


def also_items(also: Sequence[Finding]) -> list[Item]:
    """The other findings that hold this window, each with the share of time it claims (the
    split against the primary's) and its own confidence."""
    if not also:
        return [("", "nothing else")]
    return [
        (
            Content.styled(f"{marker(f)} ", f"bold {tone_style(f)}"),
            Content.assemble(
                (label(f.bottleneck), f"bold {tone_style(f)}"),
                f"  {f.summary}",
                (f" · {f.share * 100:.0f} % of time" if f.share >= SHARE_SHOWN else "", "dim"),
                (f" · conf {f.confidence * 100:.0f} %", "dim"),
            ),
        )
        for f in also
    ]


class HistoryView(Widget):
    """The verdict timeline and one sparkline row per key metric, sized to the screen."""

    DEFAULT_CSS = "HistoryView { height: auto; text-wrap: nowrap; text-overflow: clip; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._history: tuple[VerdictPoint, ...] = ()

    @property
    def history(self) -> tuple[VerdictPoint, ...]:
        return self._history

    @history.setter
    def history(self, points: tuple[VerdictPoint, ...]) -> None:
        grew = bool(points) != bool(self._history)
        self._history = points
        self.refresh(layout=grew)

    def render(self) -> Content:
        return history_text(self._history, self.content_size.width)


def history_text(history: Sequence[VerdictPoint], width: int) -> Content:
    """A timeline line, a header, then ``label  sparkline  now  min  mean  max`` per metric."""
    if not history:
        return _section("Over time", ["  no verdict computed yet"])
    span = history[-1].monotonic - history[0].monotonic
    spark_width = max(width - LABEL_WIDTH - 4 * STAT_WIDTH - 4, 8)
    header = f"  {'':<{LABEL_WIDTH}}{'':<{spark_width}} " + "".join(
        f"{name:>{STAT_WIDTH}}" for name in ("now", "min", "mean", "max")
    )
    rows = [metric_row(m, history, spark_width) for m in METRICS]
    title = f"Over the last {span:.0f} s ({len(history)} verdicts)"
    return _section(title, [timeline(history), Content.styled(header, "dim"), *rows])


def timeline(history: Sequence[VerdictPoint]) -> Content:
    """The verdict runs, newest first: ◆ DATA LOADING (CPU) 12 s ← ◇ NO VERDICT YET 3 s."""
    parts: list[Content] = []
    for run in runs(history)[:4]:
        style = f"bold {tone_style(Finding(run.bottleneck, 0.0, run.severity, ''))}"
        parts.append(Content.assemble((label(run.bottleneck), style), f" {run.duration_s:.0f} s"))
    return Content.assemble("  ", ("verdict  ", "dim"), Content(" ← ").join(parts))


def metric_row(metric: Metric, history: Sequence[VerdictPoint], spark_width: int) -> Content:
    values = [metric.read(point) for point in history]
    summary = stats(values)
    top = metric.top or (summary[2] if summary and summary[2] > 0 else 1.0)
    numbers = [values[-1], *(summary or (None, None, None))]
    cells = "".join(f"{_num(v, metric.unit):>{STAT_WIDTH}}" for v in numbers)
    return Content.assemble(
        f"  {metric.label:<{LABEL_WIDTH}}",
        (sparkline(values, spark_width, top), "$accent"),
        " ",
        cells,
    )


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f} %" if unit == "%" else f"{value:.2f}"
