"""The process table (key 6): rows keyed by pid and updated cell by cell, never rebuilt.

DataTable repaints every visible row whenever any cell changes, so the table writes only cells
whose text differs from what it wrote last tick and re-sorts only when the order changed.
DataLoader workers sit indented under their trainer, whatever their own CPU use.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable

from collectors.snapshot import ProcessSnapshot
from tui.format import NA, fmt_bytes, fmt_pct, fmt_rate

COLUMNS = (
    ("pid", "PID", 8),
    ("user", "USER", 9),
    ("cpu", "CPU%", 6),
    ("rss", "RSS", 10),
    ("read", "READ/s", 10),
    ("write", "WRITE/s", 10),
    ("gpu", "GPU MEM", 10),
    ("command", "COMMAND", 160),
)
WORKER_PREFIX = "└ "


class ProcessTable(DataTable):
    """Processes sorted by CPU, each trainer followed by its DataLoader workers."""

    KEY = "6"
    TITLE = "Processes"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="panel", cursor_type="row", zebra_stripes=False)
        self.border_title = f"{self.KEY} {self.TITLE}"
        self._cells: dict[int, tuple[str, ...]] = {}
        self._order: list[int] = []

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)

    def show_processes(self, processes: Sequence[ProcessSnapshot]) -> None:
        """Bring the table to ``processes``: add, update or remove rows by pid."""
        ordered = display_order(processes)
        wanted = {proc.pid: row_cells(proc, indented) for proc, indented in ordered}
        for pid in [pid for pid in self._cells if pid not in wanted]:
            self.remove_row(str(pid))
            del self._cells[pid]
        for pid, cells in wanted.items():
            self._write_row(pid, cells)
        order = [proc.pid for proc, _ in ordered]
        if order != self._order:
            rank = {str(pid): i for i, pid in enumerate(order)}
            self.sort("pid", key=lambda cell: rank[cell.plain.strip()])
            self._order = order

    def _write_row(self, pid: int, cells: tuple[str, ...]) -> None:
        old = self._cells.get(pid)
        if old is None:
            self.add_row(
                *(_cell(key, text) for key, text in zip(_KEYS, cells, strict=True)), key=str(pid)
            )
        else:
            for key, text, before in zip(_KEYS, cells, old, strict=True):
                if text != before:
                    self.update_cell(str(pid), key, _cell(key, text))
        self._cells[pid] = cells


_KEYS = tuple(key for key, _, _ in COLUMNS)
_LEFT = {"user", "command"}


def _cell(key: str, text: str) -> Text:
    return Text(text, justify="left" if key in _LEFT else "right", no_wrap=True)


def display_order(processes: Sequence[ProcessSnapshot]) -> list[tuple[ProcessSnapshot, bool]]:
    """Top-level processes by CPU (highest first); workers follow their trainer, indented."""
    pids = {proc.pid for proc in processes}
    workers: dict[int, list[ProcessSnapshot]] = {}
    leaders = []
    for proc in processes:
        group = proc.group_pid
        if group is not None and group != proc.pid and group in pids:
            workers.setdefault(group, []).append(proc)
        else:
            leaders.append(proc)
    ordered: list[tuple[ProcessSnapshot, bool]] = []
    for leader in sorted(leaders, key=_cpu_key):
        ordered.append((leader, False))
        ordered += [(w, True) for w in sorted(workers.get(leader.pid, ()), key=lambda p: p.pid)]
    return ordered


def _cpu_key(proc: ProcessSnapshot) -> tuple[float, int]:
    return (-(proc.cpu_pct or 0.0), proc.pid)


def row_cells(proc: ProcessSnapshot, indented: bool) -> tuple[str, ...]:
    """The text of each column; the command shows the full cmdline, falling back to the name."""
    command = proc.cmdline or proc.name
    return (
        str(proc.pid),
        proc.user or NA,
        fmt_pct(proc.cpu_pct, 1),
        fmt_bytes(proc.rss_bytes),
        fmt_rate(proc.read_bytes_per_s),
        fmt_rate(proc.write_bytes_per_s),
        "" if proc.gpu_mem_bytes is None else fmt_bytes(proc.gpu_mem_bytes),
        (WORKER_PREFIX if indented else "") + command,
    )
