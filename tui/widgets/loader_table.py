"""The DataLoader table of the focused job: how long each rank waits for data, what loads it.

A multi-rank job gets one row per rank, its workers folded in (count, CPU summed, reads
summed): 8 ranks x 4 workers would be 40 rows that say less than 8.  A single-rank job gets its
rank row followed by one row per worker, where the hot worker is what the user looks for.
WAIT% is the share of time a runnable worker waited for a CPU (pidstat's %wait, from the
process collector's schedstat figures): workers at 60 % CPU and 40 % WAIT% are starved of
cores, not slow.  The column appears only when the process table has the figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from traintop.collectors.snapshot import JobSnapshot, ProcessSnapshot, WorkerSnapshot
from traintop.tui.widgets.jobs_table import wait_style
from traintop.tui.widgets.table import Cell, Column, fit_columns
from traintop.views.format import fmt_bytes, fmt_number, fmt_pct, fmt_rate, fmt_seconds, fmt_share

HOT_WORKER_PCT = 90.0  # a worker near one full core cannot load faster
STARVED_WAIT_PCT = 20.0  # a worker waiting this long for a CPU is short of cores
COLUMNS = (
    Column("RANK", 4, left=True),
    Column("PID", 7),
    Column("WORKERS", 7, drop=5),
    Column("BATCH/S", 7, drop=3),
    Column("WAIT p50", 9),
    Column("p95", 9, drop=4),
    Column("DATA WAIT", 9),
    Column("CPU", 6),
    Column("WAIT%", 6, drop=1),
    Column("RSS", 9, drop=6),
    Column("READ", 10, drop=2),
)


@dataclass(frozen=True, slots=True)
class LoaderRow:
    """A rank (``worker`` None) or one of its workers, with the run-queue waits it needs."""

    job: JobSnapshot
    worker: WorkerSnapshot | None
    wait_pct: float | None  # run-queue wait of the worker(s), percent of the interval
    last: bool = False  # the last worker under its rank (drawn └─)


def loader_rows(
    ranks: Sequence[JobSnapshot], processes: Mapping[int, ProcessSnapshot]
) -> list[LoaderRow]:
    """One row per rank; with a single rank, its workers below it."""
    rows = [LoaderRow(job, None, _mean_wait(job.workers, processes)) for job in ranks]
    if len(ranks) != 1:
        return rows
    workers = ranks[0].workers
    return rows + [
        LoaderRow(ranks[0], w, _wait(processes.get(w.pid)), i == len(workers) - 1)
        for i, w in enumerate(workers)
    ]


def _wait(proc: ProcessSnapshot | None) -> float | None:
    return None if proc is None else proc.cpu_wait_pct


def _mean_wait(
    workers: Sequence[WorkerSnapshot], processes: Mapping[int, ProcessSnapshot]
) -> float | None:
    waits = [w for worker in workers if (w := _wait(processes.get(worker.pid))) is not None]
    return sum(waits) / len(waits) if waits else None


def loader_columns(rows: Sequence[LoaderRow], width: int) -> tuple[Column, ...]:
    """Columns that fit ``width``; WAIT% only when some row has the figure."""
    has_wait = any(row.wait_pct is not None for row in rows)
    return fit_columns([c for c in COLUMNS if has_wait or c.label != "WAIT%"], width)


def _cpu_cell(cpu_pct: float | None, workers: int) -> Cell:
    hot = cpu_pct is not None and cpu_pct >= HOT_WORKER_PCT * max(workers, 1)
    return fmt_pct(cpu_pct), "bold $warning" if hot else ""


def _wait_cell(wait_pct: float | None) -> Cell:
    starved = wait_pct is not None and wait_pct >= STARVED_WAIT_PCT
    return fmt_pct(wait_pct), "bold $warning" if starved else ""


def _sum(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def rank_cells(row: LoaderRow) -> dict[str, Cell]:
    job, workers = row.job, row.job.workers
    return {
        "RANK": (str(job.rank), "bold"),
        "PID": (str(job.pid), ""),
        "WORKERS": (str(len(workers)), ""),
        "BATCH/S": (fmt_number(job.batches_per_s), ""),
        "WAIT p50": (fmt_seconds(job.data_wait_p50_s), ""),
        "p95": (fmt_seconds(job.data_wait_p95_s), ""),
        "DATA WAIT": (fmt_share(job.data_wait_share), wait_style(job.data_wait_share)),
        "CPU": _cpu_cell(_sum([w.cpu_pct for w in workers]), len(workers)),
        "WAIT%": _wait_cell(row.wait_pct),
        "RSS": (fmt_bytes(_sum([w.rss_bytes for w in workers])) if workers else "", ""),
        "READ": (fmt_rate(_sum([w.read_bytes_per_s for w in workers])) if workers else "", ""),
    }


def worker_cells(row: LoaderRow) -> dict[str, Cell]:
    worker = row.worker
    assert worker is not None
    return {
        "RANK": (" └─" if row.last else " ├─", "$text-muted"),
        "PID": (str(worker.pid), ""),
        "CPU": _cpu_cell(worker.cpu_pct, 1),
        "WAIT%": _wait_cell(row.wait_pct),
        "RSS": (fmt_bytes(worker.rss_bytes), ""),
        "READ": (fmt_rate(worker.read_bytes_per_s), ""),
    }


def row_cells(row: LoaderRow, columns: Sequence[Column]) -> list[Cell]:
    cells = rank_cells(row) if row.worker is None else worker_cells(row)
    return [cells.get(c.label, ("", "")) for c in columns]
