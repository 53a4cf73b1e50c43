"""The focused job's rank table: one row per rank, to find the rank that holds the others back.

GAP compares each rank's own work per step (step time minus waiting on peers) with the fastest
rank's: in DDP every rank's step time converges on the slowest one, so the raw step times look
alike while the own-work gap points at the straggler.  GPU busy and CUDA memory columns appear
only when a rank reports them, so a CPU job does not carry columns of "n/a".
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.content import Content

from traintop.collectors.proc_state import stopped
from traintop.collectors.snapshot import JobSnapshot
from traintop.tui.widgets.jobs_table import STRAGGLER_GAP, state_cell, wait_style
from traintop.tui.widgets.table import Cell, Column, fit_columns, row_line
from traintop.views.format import fmt_bytes, fmt_number, fmt_seconds, fmt_share
from traintop.views.hang_text import rank_text
from traintop.views.job_groups import JobGroup, long_live_phase

COLUMNS = (
    Column("RANK", 5),
    Column("PID", 8, drop=3),
    Column("STEPS/S", 7),
    Column("STEP p50", 9),
    Column("p95", 9, drop=2),
    Column("DATA WAIT", 9),
    Column("GPU BUSY", 8, drop=4),
    Column("CUDA MEM", 10, drop=5),
    Column("GAP", 7, drop=1),
    Column("PHASE", 40, left=True, flex=True, minimum=10),
)
OPTIONAL = {"GPU BUSY": "gpu_busy_share", "CUDA MEM": "cuda_mem_allocated_bytes"}


def rank_columns(ranks: Sequence[JobSnapshot], width: int) -> tuple[Column, ...]:
    """Columns that fit ``width``, without those no rank has data for."""
    wanted = [
        c
        for c in COLUMNS
        if c.label not in OPTIONAL or any(getattr(j, OPTIONAL[c.label]) is not None for j in ranks)
    ]
    return fit_columns(wanted, width)


def _phase(job: JobSnapshot) -> Cell:
    """Where a rank is when that is news (a stall, an over-long phase), else its state."""
    phase = long_live_phase(job)
    if job.state == "stalled":
        return ("stalled: " + (phase or "no recent step"), "bold $warning")
    if phase is not None:
        return phase, "bold $warning"
    return ("", "") if job.state == "live" else state_cell(job.state)


def _gap(rank: int, gaps: dict[int, float]) -> Cell:
    gap = gaps.get(rank)
    if gap is None:
        return ("", "")
    if gap == 0.0:
        return ("fastest", "$text-muted")
    return f"+{gap:.0%}", "bold $error" if gap > STRAGGLER_GAP else ""


def _hang_place(group: JobGroup, job: JobSnapshot) -> Cell | None:
    """In a stopped job: where the rank is ("in all_reduce #1042 for 1m12s · ...", "not
    entered · ...", "gone (crashed)"); the ranks that hold the others in the error colour."""
    hang = group.hang
    if hang is None or hang.kind == "unknown":  # no ledger: the live phase says more
        return None
    place = next((p for p in hang.ranks if p.pid == job.pid), None)
    if place is None:
        return None
    odd = (place.state not in ("inside", "ahead") and hang.kind != "no_collective") or stopped(
        place.proc
    )
    return rank_text(place), "bold $error" if odd else "$warning"


def rank_cells(job: JobSnapshot, gaps: dict[int, float]) -> dict[str, Cell]:
    return {
        "RANK": (str(job.rank), "bold"),
        "PID": (str(job.pid), ""),
        "STEPS/S": (fmt_number(job.steps_per_s), ""),
        "STEP p50": (fmt_seconds(job.step_time_p50_s), ""),
        "p95": (fmt_seconds(job.step_time_p95_s), ""),
        "DATA WAIT": (fmt_share(job.data_wait_share), wait_style(job.data_wait_share)),
        "GPU BUSY": (fmt_share(job.gpu_busy_share), ""),
        "CUDA MEM": (fmt_bytes(job.cuda_mem_allocated_bytes), ""),
        "GAP": _gap(job.rank, gaps),
        "PHASE": _phase(job),
    }


def rank_rows(
    group: JobGroup, columns: tuple[Column, ...], width: int, rows: range, cursor: int | None
) -> list[Content]:
    """The rows ``rows`` of the table (only those on screen are built)."""
    lines = []
    for index in rows:
        cells = rank_cells(group.ranks[index], group.gaps)
        place = _hang_place(group, group.ranks[index])
        if place is not None:
            cells["PHASE"] = place
        lines.append(row_line([cells[c.label] for c in columns], columns, width, index == cursor))
    return lines
