"""The jobs table: one row per job, ranks folded in, the way htop lists processes.

Which columns fit a width, and the text and colour of each cell.  A state word carries its
badge ("● live", "✗ crashed") so the state reads without colour too (NO_COLOR, 16 colours).
Samples/s is "—" when a rank does not count samples: a 0 there would read as a dead loader.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from textual.content import Content

from traintop.tui.widgets.job_detail import relative_sparkline
from traintop.tui.widgets.table import Cell, Column, fit_columns, marker_room, row_line
from traintop.views.format import fmt_age, fmt_number, fmt_seconds, fmt_settled_age, fmt_share
from traintop.views.hang_text import level_style, state_text
from traintop.views.job_groups import ENDED_COLLAPSE_S, EndedSummary, JobGroup, fmt_first_step

UNKNOWN = "—"
STRAGGLER_GAP = 0.10  # a slowest rank this much behind the fastest is coloured
WAIT_WARNING_SHARE = 0.30  # a step waiting this much on data is data-bound
WAIT_ERROR_SHARE = 0.60
BADGES = {
    "starting": "◌ starting",
    "live": "● live",
    "stalled": "◐ stalled",
    "finished": "✓ finished",
    "crashed": "✗ crashed",
    "stopped": "■ stopped",
    "gone": "† gone",
    "restarted": "↻ restarted",
}
STATE_STYLES = {
    "starting": "$accent",
    "live": "$success",
    "stalled": "bold $warning",
    "crashed": "bold $error",
    "gone": "bold $error",
    "stopped": "$text-muted",
    "finished": "$text-muted",
    "restarted": "$text-muted",
}
COLUMNS = (
    Column("JOB", 40, left=True, flex=True, minimum=12),
    Column("RANKS", 5),
    Column("STATE", 12, left=True),
    Column("STEPS/S", 7),
    Column("SAMPLES/S", 9),
    Column("STEP p50", 9, drop=2),
    Column("SLOWEST", 10, drop=1),
    Column("DATA WAIT", 9),
    Column("LAST STEP", 9, drop=3),
    Column("AGE", 7, drop=4),
    Column("1ST STEP", 8, drop=6),
    Column("STEP TIME", 16, left=True, drop=5),
)


MAX_MARKER = len("▲ 99 ▼ 99 more") + 1
NAME_KEPT = 26  # "▶ " and a 24-character job name
ALWAYS_SHOWN = 3  # job rows the Training panel shows before it gives lines to the detail


def shows_history(width: int, scrolls: bool, longest: int) -> bool:
    """Whether the rows carry their step-time sparkline at ``width`` (else the detail draws
    it).  A table that scrolls decides with room for the largest scroll marker, so that the
    column does not come and go as the cursor moves."""
    room = width - (MAX_MARKER if scrolls else 0)
    return any(c.label == "STEP TIME" for c in fit_columns(_with_job(COLUMNS, longest), room))


def job_columns(width: int, marker: str, scrolls: bool, longest: int) -> tuple[Column, ...]:
    """Columns that fit ``width`` beside ``marker``; JOB no wider than the ``longest`` name
    (and its ▶) needs, so the figures stay close to the names they belong to."""
    wanted = COLUMNS if shows_history(width, scrolls, longest) else COLUMNS[:-1]
    return fit_columns(_with_job(wanted, longest), width - marker_room(marker))


def _with_job(columns: tuple[Column, ...], longest: int) -> tuple[Column, ...]:
    """JOB sized to the longest name; optional columns drop before a name up to
    ``NAME_KEPT`` cells is cut (a name is what a person looks for first)."""
    job = columns[0]
    width = min(job.width, max(longest + 2, len("JOB")))
    return (
        replace(job, width=width, minimum=max(job.minimum, min(width, NAME_KEPT))),
        *columns[1:],
    )


def state_cell(state: str) -> Cell:
    return BADGES.get(state, state), STATE_STYLES.get(state, "")


def group_state_cell(group: JobGroup) -> Cell:
    """The job's state; a job that stopped stepping says for how long ("HUNG 1m12s",
    "STALLED 14s"); a running job with crashed (or gone) ranks says how many ("● live ✗1"):
    the others are about to hang in their next collective."""
    if group.running and group.hang is not None:
        return state_text(group.hang), level_style(group.hang)
    text, style = state_cell(group.state)
    crashed = sum(rank.state in ("crashed", "gone") for rank in group.ranks)
    if group.running and crashed:
        return f"{text} ✗{crashed}", "bold $error"
    return text, style


def wait_style(share: float | None) -> str:
    """Data-wait share coloured by how data-bound the step is."""
    if share is not None and share > WAIT_ERROR_SHARE:
        return "bold $error"
    if share is not None and share > WAIT_WARNING_SHARE:
        return "bold $warning"
    return ""


def _slowest(group: JobGroup) -> Cell:
    if group.slowest is None:
        return ("", "")
    rank, gap = group.slowest
    return f"r{rank} +{gap:.0%}", "bold $error" if gap > STRAGGLER_GAP else ""


def clock_cells(group: JobGroup, now: float) -> tuple[str, str]:
    """LAST STEP and AGE at wall-clock ``now``: the cells that change with the clock alone.

    LAST STEP is blank while the job steps, else how long ago its newest step was (a stall,
    or when it ended).  An ended job's are counted in coarser steps (fmt_settled_age).
    """
    fmt = fmt_age if group.running else fmt_settled_age
    age = None if group.started_at is None else fmt(max(0.0, now - group.started_at))
    if group.state == "live":
        last = ""
    elif group.last_step_at is None:
        last = "never"
    else:
        last = f"{fmt(max(0.0, now - group.last_step_at))} ago"
    return last, age or UNKNOWN


def first_step_cell(group: JobGroup, now: float) -> Cell:
    """How long the first step took (the warm-up); while it runs, how long so far ("1m25s…")."""
    if group.first_step_s is not None:
        return fmt_first_step(group.first_step_s), ""
    if group.state == "starting" and group.started_at is not None:
        return f"{fmt_age(max(0.0, now - group.started_at))}…", "$accent"
    return "", ""


def job_cells(group: JobGroup, now: float, focused: bool, history: Sequence[float]) -> list[Cell]:
    """The row's cells in COLUMNS order; the focused job is marked with ▶."""
    samples = group.samples_per_s
    last_step, age = clock_cells(group, now)
    cells = {
        "JOB": (("▶ " if focused else "  ") + group.name, "bold" if focused else ""),
        "RANKS": (group.rank_count, ""),
        "STATE": group_state_cell(group),
        "STEPS/S": (fmt_number(group.steps_per_s), ""),
        "SAMPLES/S": (UNKNOWN if samples is None else fmt_number(samples), ""),
        "STEP p50": (fmt_seconds(group.step_time_p50_s), ""),
        "SLOWEST": _slowest(group),
        "DATA WAIT": (fmt_share(group.data_wait_share), wait_style(group.data_wait_share)),
        "LAST STEP": (last_step, "$text-muted"),
        "AGE": (age, "$text-muted"),
        "1ST STEP": first_step_cell(group, now),
        "STEP TIME": (relative_sparkline(history, 16) if history else "", "$accent"),
    }
    return list(cells.values())


def job_row(
    group: JobGroup, columns: tuple[Column, ...], width: int, now: float, cursor: bool,
    focused: bool, history: Sequence[float],
) -> Content:  # fmt: skip
    """One job's row; ``history`` is its step-time p50 over the last ticks, oldest first."""
    texts = job_cells(group, now, focused, history)
    cells = dict(zip((c.label for c in COLUMNS), texts, strict=True))
    return row_line([cells[c.label] for c in columns], columns, width, cursor)


def summary_row(summary: EndedSummary, width: int, cursor: bool) -> Content:
    """ "▸ 24 jobs ended over 30 s ago: 20 finished, 4 crashed  (e: show)"."""
    arrow, verb = ("▾", "hide") if summary.expanded else ("▸", "show")
    plural = "job" if summary.count == 1 else "jobs"
    states = ", ".join(f"{count} {state}" for state, count in summary.states)
    text = f"{arrow} {summary.count} {plural} ended over {ENDED_COLLAPSE_S:.0f} s ago: {states}"
    hint = f"  (e: {verb})"
    cells = [(text + hint, "$text-muted")]
    return row_line(cells, (Column("", width, left=True),), width, cursor)
