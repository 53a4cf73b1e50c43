"""The disk panel (key 4): iostat -x for every block device, with a throughput sparkline."""

from __future__ import annotations

from textual.content import Content

from traintop.collectors.snapshot import DiskSnapshot, Snapshot
from traintop.tui.widgets.device_table import RateHistory, scale, table, total
from traintop.tui.widgets.panel import Panel
from traintop.views.format import NA, fmt_count, fmt_pct, fmt_rate, level_style

SPARK_FLOOR_BYTES_PER_S = 1e6
HEADER = (
    ("device", 8),
    ("read", 10),
    ("write", 10),
    ("r/s", 5),
    ("w/s", 5),
    ("busy", 5),
    ("await", 6),
)


class DiskPanel(Panel):
    """Read/write rates, IOPS, busy % and await per device; busy and await show saturation."""

    KEY = "4"
    TITLE = "Disk"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._history = RateHistory()

    def record(self, snapshot: Snapshot) -> None:
        for disk in snapshot.disks:
            self._history.add(disk.name, total(disk.read_bytes_per_s, disk.write_bytes_per_s))

    def build_lines(self, snapshot: Snapshot, width: int) -> list[Content]:
        if not snapshot.disks:
            return [Content.styled("no block devices", "dim")]
        rows = []
        for disk in snapshot.disks:
            history = self._history.get(disk.name)
            rows.append((disk_cells(disk), history, scale(history, SPARK_FLOOR_BYTES_PER_S)))
        return table(HEADER, rows, width)


def fmt_await(ms: float | None) -> str:
    """I/O latency in at most 6 cells: "0.4ms", "12.3ms", "250ms"."""
    if ms is None:
        return NA
    return f"{ms:.0f}ms" if ms >= 99.95 else f"{ms:.1f}ms"


def disk_cells(disk: DiskSnapshot) -> list[Content | str]:
    await_text = fmt_await(disk.await_ms)
    return [
        disk.name,
        fmt_rate(disk.read_bytes_per_s),
        fmt_rate(disk.write_bytes_per_s),
        fmt_count(disk.read_iops),
        fmt_count(disk.write_iops),
        Content.styled(fmt_pct(disk.busy_pct), level_style(disk.busy_pct, 60, 90)),
        await_text,
    ]
