"""The focused job's lines under the jobs table: where a step goes, and its history.

The phase bar answers "compute or waiting?": each phase the probe timed gets its share of the
bar, waiting on peers (all-reduce, barriers) in the error colour so that a communication-bound
job stands out.  Its legend sits beside it when the width allows, so an 8-rank job and eight
GPUs still leave room for the CPU and process panels on a 200x50 terminal.  The step-time
history (p50 over the last few minutes, scaled between its own minimum and maximum, because
step times sit far from zero and users look for spikes and drift) is drawn here only when the
jobs table is too narrow to carry it in its STEP TIME column.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.content import Content

from traintop.collectors.phase_names import is_comm_phase
from traintop.collectors.snapshot import JobSnapshot
from traintop.diagnosis.model import Hang
from traintop.tui.line import Line
from traintop.views.format import fmt_seconds, fmt_share, split_bar
from traintop.views.hang_text import detail_lines as hang_detail
from traintop.views.hang_text import level_style
from traintop.views.job_groups import JobGroup, fmt_first_step

MIN_SPARK_SPAN = 0.10  # the sparkline spans at least 10 % of the peak, so noise stays flat
SPARK_LEVELS = "▁▂▃▄▅▆▇█"
MIN_BAR = 20  # the phase bar keeps at least this many cells beside its legend
LABEL = "$text-muted"
PHASE_STYLES = {
    "data": "$warning",
    "data_wait": "$warning",
    "fwd": "$primary",
    "forward": "$primary",
    "bwd": "$secondary",
    "backward": "$secondary",
    "opt": "$success",
    "optim": "$success",
    "optimizer": "$success",
    "other": LABEL,
}
COMM_STYLE = "$error"  # waiting on peers
CUSTOM_STYLES = ("$primary-lighten-2", "$foreground-darken-1")
Segment = tuple[str, float, float | None, str]  # (label, share, mean seconds, style)


def segments(job: JobSnapshot) -> list[Segment]:
    """Each part of the step with its share, mean time and colour; what is left is "other"."""
    if not job.phases:
        if job.data_wait_share is None:
            return []
        share = min(max(job.data_wait_share, 0.0), 1.0)
        return [("data", share, None, PHASE_STYLES["data"]), ("compute", 1.0 - share, None, LABEL)]
    parts: list[Segment] = []
    for index, phase in enumerate(job.phases):
        style = PHASE_STYLES.get(phase.name.lower()) or (
            COMM_STYLE if is_comm_phase(phase.name) else CUSTOM_STYLES[index % 2]
        )
        parts.append((phase.name, phase.share, phase.mean_s, style))
    rest = 1.0 - sum(p.share for p in job.phases)
    if rest > 0.005 and not any(p.name == "other" for p in job.phases):
        parts.append(("other", rest, None, LABEL))
    return parts


def relative_sparkline(values: Sequence[float], width: int) -> str:
    """The last ``width`` values scaled between their minimum and maximum."""
    tail = values[-width:]
    low, high = min(tail), max(tail)
    span = max(high - low, abs(high) * MIN_SPARK_SPAN) or 1.0
    top = len(SPARK_LEVELS) - 1
    chars = (SPARK_LEVELS[min(round((v - low) / span * top), top)] for v in tail)
    return "".join(chars).rjust(width)


def hang_lines(hang: Hang, width: int) -> list[Content]:
    """A stopped job's case above its phase bar: the case in its level's colour (a warning
    while stalled, information while busy, an error once hung), then its ranks folded by where
    they are."""
    lines = hang_detail(hang)
    head = Content.styled(lines[0], level_style(hang)).truncate(width, ellipsis=True)
    return [head, *(Content(line).truncate(width, ellipsis=True) for line in lines[1:])]


def life_lines(group: JobGroup, width: int) -> list[Content]:
    """Where a starting job is, or how an ended one ended, above its phase bar; the first
    step's length (the warm-up) once it is known."""
    text = group.life
    if group.first_step_s is not None:
        first = f"first step {fmt_first_step(group.first_step_s)}"
        text = f"{text} · {first}" if text else first
    style = "$accent" if group.state == "starting" else "$text-muted"
    return [Content.styled(text, style).truncate(width, ellipsis=True)] if text else []


def detail_lines(job: JobSnapshot, history: Sequence[float], width: int) -> list[Content]:
    """The phase bar with its legend beside it (below it when narrow), then the step-time
    history when ``history`` is given (the jobs table had no room for it)."""
    parts = segments(job)
    if not parts:
        lines = [Line().add("no step breakdown reported", LABEL)]
    elif (means := _legend_fits(parts, width - MIN_BAR - 1)) is not None:
        legend = _add_legend(Line(), parts, means)
        lines = [_add_legend(_bar(parts, width - len(legend) - 1).add(" "), parts, means)]
    else:
        means = _legend_fits(parts, width)
        lines = [_bar(parts, width), _add_legend(Line(), parts, bool(means))]
    if history:
        lines.append(add_history(Line(), history, width))
    return [line.content() for line in lines]


def _legend_fits(parts: Sequence[Segment], width: int) -> bool | None:
    """Whether the legend fits ``width`` with mean times (True), without (False), or not."""
    for means in (True, False):
        if len(_add_legend(Line(), parts, means)) <= width:
            return means
    return None


def _bar(parts: Sequence[Segment], width: int) -> Line:
    counts = split_bar((share * 100 for _, share, _, _ in parts), width)
    line = Line()
    for count, (_, _, _, style) in zip(counts, parts, strict=True):
        line.add("█" * count, style)
    return line.add(" " * (width - sum(counts)))


def _add_legend(line: Line, parts: Sequence[Segment], means: bool) -> Line:
    for index, (name, share, mean_s, style) in enumerate(parts):
        mean = "" if mean_s is None or not means else f" {fmt_seconds(mean_s)}"
        line.add("  " if index else "").add("■ ", style).add(f"{name} ", LABEL)
        line.add(f"{fmt_share(share)}{mean}", "bold")
    return line


def add_history(line: Line, history: Sequence[float], width: int) -> Line:
    """Append "step p50 ▁▂▃█▇ 300 ms–390 ms" in ``width`` cells, when there is history and
    room for it; the range is that of the values drawn."""
    label = "step p50 "
    cells = width - len(label) - len(" 999 ms–999 ms")
    if not history or cells < 4:
        return line
    tail = history[-cells:]
    low, high = fmt_seconds(min(tail)), fmt_seconds(max(tail))
    suffix = f" {low}" if low == high else f" {low}–{high}"
    spark = relative_sparkline(tail, width - len(label) - len(suffix))
    return line.add(label, LABEL).add(spark, "$accent").add(suffix, LABEL)
