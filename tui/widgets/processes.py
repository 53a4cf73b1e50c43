"""What the process table (key 6) shows: which rows, in which order, in which columns.

Pure functions over ``ProcessSnapshot`` rows, so ordering, the tree of a trainer and its
DataLoader workers, the columns that fit a width and the text of each row are tested without a
terminal.  ``tui/widgets/process_table.py`` draws the result.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from textual.content import Content, Span

from traintop.collectors.snapshot import ProcessSnapshot
from traintop.tui.line import line_content
from traintop.views.format import NA, level_style, truncate

KTHREADD_PID = 2
"""Linux starts every kernel thread from kthreadd (pid 2); htop hides them the same way."""

SORT_ORDER = ("cpu", "wait", "mem", "gpu", "sm", "io", "pid")
"""The sort columns ``s`` cycles through, the default first."""

_SORT_KEYS: dict[str, Callable[[ProcessSnapshot], float]] = {
    # By the figure as shown (one decimal), then by pid: two rows that read the same never
    # trade places between ticks over a difference in the last bits of a float.
    "cpu": lambda p: -1.0 if p.cpu_pct is None else -round(p.cpu_pct, 1),
    "wait": lambda p: -1.0 if p.cpu_wait_pct is None else -round(p.cpu_wait_pct, 1),
    "mem": lambda p: -float(p.rss_bytes or 0),
    "gpu": lambda p: -float(p.gpu_mem_bytes or 0),
    "sm": lambda p: -1.0 if p.gpu_sm_pct is None else -p.gpu_sm_pct,
    "io": lambda p: -((p.read_bytes_per_s or 0.0) + (p.write_bytes_per_s or 0.0)),
    "pid": lambda p: 0.0,
}
_INTERPRETER = re.compile(r"^(python|pypy|node|ruby|perl|php|java|bash|sh)[0-9.]*$")
MIN_COMMAND_WIDTH = 40
"""Room the command keeps before optional columns are dropped (I/O first, then WAIT%)."""
WAIT_WARN_PCT, WAIT_ERROR_PCT = 20.0, 50.0
"""WAIT% colours: a thread queueing a fifth of the time loses a fifth of its speed (the
oversubscription threshold in docs/diagnosis.md); at half it waits as long as it runs."""


@dataclass(frozen=True, slots=True)
class Column:
    """One table column: ``sort`` is the sort mode it shows an arrow for; columns with a
    higher ``drop`` leave first when the width is short (0: always shown)."""

    key: str
    label: str
    width: int
    sort: str | None = None
    drop: int = 0


COLUMNS = (
    Column("pid", "PID", 5, "pid"),
    Column("user", "USER", 8),
    Column("state", "S", 1, drop=1),
    Column("cpu", "CPU%", 6, "cpu"),
    Column("wait", "WAIT%", 6, "wait", drop=1),
    Column("rss", "RSS", 6, "mem"),
    Column("read", "READ/s", 7, "io", drop=2),
    Column("write", "WRITE/s", 8, "io", drop=2),
    Column("gpu", "GPU MEM", 8, "gpu"),
    Column("sm", "SM%", 5, "sm"),
)
"""``SM%`` is the process's share of its GPUs' SM time (NVML per-process utilization, nvitop's
%SM), shown only where some process has one."""


@dataclass(frozen=True, slots=True)
class Row:
    """A process in display order with its tree prefix ("├─ " for a DataLoader worker)."""

    proc: ProcessSnapshot
    prefix: str = ""


def is_kernel_thread(proc: ProcessSnapshot) -> bool:
    """kthreadd and its children, which an htop user hides with ``K``."""
    return proc.pid == KTHREADD_PID or proc.ppid == KTHREADD_PID


def display_rows(
    processes: Sequence[ProcessSnapshot], sort: str = "cpu", show_kernel: bool = False
) -> list[Row]:
    """Processes sorted by ``sort``; every trainer directly followed by its worker tree."""
    shown = [p for p in processes if show_kernel or not is_kernel_thread(p)]
    pids = {p.pid for p in shown}
    children: dict[int | None, list[ProcessSnapshot]] = {}
    for proc in shown:
        parent = proc.group_pid if proc.group_pid in pids and proc.group_pid != proc.pid else None
        children.setdefault(parent, []).append(proc)
    key = _SORT_KEYS[sort]
    rows: list[Row] = []
    _walk(children, None, lambda p: (key(p), p.pid), "", rows)
    return rows


def _walk(children, parent, order, indent: str, rows: list[Row]) -> None:
    """Depth-first over the group tree, siblings in sort order, drawing tree branches."""
    kids = sorted(children.get(parent, ()), key=order)
    for i, proc in enumerate(kids):
        last = i == len(kids) - 1
        branch = "" if parent is None else indent + ("└─ " if last else "├─ ")
        rows.append(Row(proc, branch))
        deeper = "" if parent is None else indent + ("   " if last else "│  ")
        _walk(children, proc.pid, order, deeper, rows)


def plan_columns(width: int, rows: Sequence[Row]) -> tuple[Column, ...]:
    """Columns that fit ``width``, PID and USER sized to the rows; COMMAND takes the rest."""
    pid_width = max([5, *(len(str(row.proc.pid)) for row in rows)])
    user_width = min(8, max([4, *(len(row.proc.user or NA) for row in rows)]))
    sized = [
        Column(c.key, c.label, pid_width if c.key == "pid" else user_width, c.sort)
        if c.key in ("pid", "user")
        else c
        for c in COLUMNS
        if c.key != "sm" or any(row.proc.gpu_sm_pct is not None for row in rows)
    ]
    for level in sorted({c.drop for c in sized if c.drop}, reverse=True):
        if sum(c.width + 1 for c in sized) + MIN_COMMAND_WIDTH <= width:
            break
        sized = [c for c in sized if c.drop != level]
    return tuple(sized)


def header(columns: Sequence[Column], sort: str, width: int) -> Content:
    """Column labels; the sorted column carries a ▼ (▲ for PID, which sorts ascending)."""
    cells = []
    for column in columns:
        arrow = ("▲" if sort == "pid" else "▼") if column.sort == sort else ""
        label = column.label + arrow
        cells.append(
            label.ljust(column.width) if column.key == "user" else label.rjust(column.width)
        )
    text = " ".join([*cells, "COMMAND"])
    return Content.styled(text[:width].ljust(width), "bold reverse")


def row_content(row: Row, columns: Sequence[Column], width: int, selected: bool) -> Content:
    """One process as a line of ``width`` cells; the selected line is drawn in reverse."""
    proc = row.proc
    cells = [_cell(proc, column) for column in columns]
    head = " ".join(cells) + " "
    command = row.prefix + short_command(proc.cmdline, proc.name)
    text = (head + truncate(command, width - len(head))).ljust(width)
    if selected:
        return Content.styled(text, "bold reverse")
    spans = [
        *_state_span(columns, proc.state),
        *_level_span(columns, "cpu", proc.cpu_pct, 90, 99),
        *_level_span(columns, "wait", proc.cpu_wait_pct, WAIT_WARN_PCT, WAIT_ERROR_PCT),
    ]
    if row.prefix:
        spans.append(Span(len(head), len(head) + len(row.prefix), "dim"))
    if is_kernel_thread(proc):
        spans.append(Span(0, len(text), "dim"))
    return line_content(text, spans)


_STATE_STYLES = {"R": "bold $success", "D": "bold $error"}
"""htop's colours for the states that matter: runnable (on a CPU or queued), blocked on I/O."""


def _state_span(columns: Sequence[Column], state: str | None) -> list[Span]:
    keys = [c.key for c in columns]
    if state not in _STATE_STYLES or "state" not in keys:
        return []
    start = sum(c.width + 1 for c in columns[: keys.index("state")])
    return [Span(start, start + 1, _STATE_STYLES[state])]


def _level_span(
    columns: Sequence[Column], key: str, value: float | None, warn: float, error: float
) -> list[Span]:
    """The colour of a percentage cell, if the column is shown and has a value."""
    keys = [c.key for c in columns]
    if value is None or key not in keys:
        return []
    index = keys.index(key)
    start = sum(c.width + 1 for c in columns[:index])
    return [Span(start, start + columns[index].width, level_style(value, warn, error))]


_CELL_TEXT: dict[str, Callable[[ProcessSnapshot], str]] = {
    "pid": lambda proc: str(proc.pid),
    "user": lambda proc: proc.user or NA,
    "state": lambda proc: proc.state or "",
    "cpu": lambda proc: NA if proc.cpu_pct is None else f"{proc.cpu_pct:.1f}",
    "wait": lambda proc: NA if proc.cpu_wait_pct is None else f"{proc.cpu_wait_pct:.1f}",
    "rss": lambda proc: compact_bytes(proc.rss_bytes),
    "read": lambda proc: compact_rate(proc.read_bytes_per_s),
    "write": lambda proc: compact_rate(proc.write_bytes_per_s),
    "gpu": lambda proc: "" if proc.gpu_mem_bytes is None else compact_bytes(proc.gpu_mem_bytes),
    "sm": lambda proc: "" if proc.gpu_sm_pct is None else f"{proc.gpu_sm_pct:.0f}",
}


def _cell(proc: ProcessSnapshot, column: Column) -> str:
    text = _CELL_TEXT[column.key](proc)
    if column.key == "user":
        return truncate(text, column.width).ljust(column.width)
    return text.rjust(column.width)


def short_command(cmdline: str, name: str) -> str:
    """The program name plus its arguments: "/opt/py/bin/python3.11 train.py" -> "python train.py".

    Only a path in front is cut (a kernel thread's "[kworker/0:1]" keeps its slash), and an
    interpreter loses its version suffix, which every row would otherwise repeat.
    """
    if not cmdline:
        return name
    program, _, args = cmdline.partition(" ")
    if program.startswith(("/", "./", "../")):
        program = os.path.basename(program)
    if match := _INTERPRETER.match(program):
        program = match.group(1)
    return f"{program} {args}" if args else program


def compact_bytes(value: float | None) -> str:
    """htop-style sizes that fit six cells: 780K, 9.2M, 512M, 24.0G."""
    return NA if value is None else _scaled(value / 1024, 1024)


def compact_rate(value: float | None) -> str:
    """Decimal bytes/s in seven cells: 0, 950, 180K, 2.0M, 118M."""
    if value is None:
        return NA
    return f"{value:.0f}" if round(value, 0) < 1000 else _scaled(value / 1000, 1000)


def _scaled(size: float, base: float) -> str:
    """``size`` in kilo-units, stepped up until it prints under 1000: one decimal below 10.
    Compared as printed: 999.6 is "1.0M", never "1000K"; 9.96 is "10K", never "10.0K"."""
    for unit in "KMGTP":
        if round(size, 0) < 1000 or unit == "P":
            return f"{size:.1f}{unit}" if round(size, 1) < 10 else f"{size:.0f}{unit}"
        size /= base
    raise AssertionError("unreachable")  # pragma: no cover
