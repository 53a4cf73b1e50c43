"""The GPU panel (key 1): one compact row per GPU plus a utilization history per GPU
(columns: tui/widgets/gpu_row.py)."""

from __future__ import annotations

from collections import deque

from textual.content import Content

from traintop.collectors.snapshot import Snapshot
from traintop.tui.widgets.gpu_row import badge_need, gpu_row, gpu_util, plan_layout
from traintop.tui.widgets.panel import Panel

HISTORY_LEN = 120
_TWO_COLUMNS_MIN_WIDTH = 196  # two 97-cell columns still hold bars, clocks and the badge
_SEPARATOR = " │ "


class GpuPanel(Panel):
    """Every GPU on one line each; more than 8 GPUs use two columns on wide terminals."""

    KEY = "1"
    TITLE = "GPU"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._history: dict[int, deque[float | None]] = {}
        # Widest throttle badge seen so far: it only grows, so a reason flickering on and off
        # does not make the other columns jump from tick to tick.
        self._badge_need = 0

    def record(self, snapshot: Snapshot) -> None:
        for gpu in snapshot.gpus:
            series = self._history.setdefault(gpu.index, deque(maxlen=HISTORY_LEN))
            series.append(None if gpu.lost else gpu_util(gpu))

    def history(self, index: int) -> tuple[float | None, ...]:
        """Utilization samples of GPU ``index``, oldest first (for tests and diagnosis views)."""
        return tuple(self._history.get(index, ()))

    def build_lines(self, snapshot: Snapshot, width: int) -> list[Content]:
        status = snapshot.gpu_status
        if not status.available:
            reason = status.message or "reason unknown"
            return [Content.styled(f"NVML unavailable: {reason}", "$warning")]
        if not snapshot.gpus:
            driver = f" (driver {status.driver_version})" if status.driver_version else ""
            return [Content.styled(f"no NVIDIA GPU found{driver}", "dim")]
        two_columns = len(snapshot.gpus) > 8 and width >= _TWO_COLUMNS_MIN_WIDTH
        column_width = (width - len(_SEPARATOR)) // 2 if two_columns else width
        fans = any(gpu.fan_pct is not None for gpu in snapshot.gpus)
        gpm = any(gpu.sm_active_pct is not None for gpu in snapshot.gpus)
        self._badge_need = max(self._badge_need, badge_need(snapshot.gpus))
        layout = plan_layout(column_width, self._badge_need, fans, gpm)
        rows = [gpu_row(gpu, layout, self._history.get(gpu.index, ())) for gpu in snapshot.gpus]
        if not two_columns:
            return rows
        half = (len(rows) + 1) // 2
        left, right = rows[:half], rows[half:]
        return [
            Content.assemble(a.pad_right(column_width - a.cell_length), (_SEPARATOR, "dim"), b)
            for a, b in zip(left, [*right, Content("")], strict=False)
        ]
