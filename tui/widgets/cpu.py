"""The CPU panel (key 2): htop-style per-core bars in as many columns as the width allows.

Under the whole-machine line, the CPU limit of the live job held tightest by its cgroup (its
quota or cpuset: the cores it may use, not the host's), in the warning colour while the quota
throttles it (views/cpu_limit.py).

Three densities keep 2 to 256 cores readable: bar cells, then compact percentage cells, then a
one-character heat map per core, each chosen only when the previous one would need more than
``MAX_ROWS`` lines.
"""

from __future__ import annotations

import math

from textual.content import Content

from traintop.collectors.snapshot import CpuCore, CpuSnapshot, Snapshot
from traintop.tui.line import Line
from traintop.tui.widgets.bars import stacked_meter
from traintop.tui.widgets.panel import Panel
from traintop.views.cpu_limit import limit_line
from traintop.views.format import NA, fmt_pct, level_style, sparkline

MAX_ROWS = 8
_BAR_CELL_MIN = 18  # "  0[||||||||] 45%": index 3, brackets 2, bar >= 8, percent 5
_BAR_CELL_EXTRA = 10
_BAR_MAX = 40
_COMPACT_CELL = 8  # "  0  45%"
USER_STYLE, SYSTEM_STYLE, IOWAIT_STYLE = "$success", "$error", "$secondary"
_LEGEND = [
    ("  ", ""),
    ("usr", USER_STYLE),
    (" ", ""),
    ("sys", SYSTEM_STYLE),
    (" ", ""),
    ("iowait", IOWAIT_STYLE),
]


class CpuPanel(Panel):
    """Per-core utilization split into user/system/iowait, plus load average and frequency."""

    KEY = "2"
    TITLE = "CPU"

    def build_lines(self, snapshot: Snapshot, width: int) -> list[Content]:
        cpu = snapshot.cpu
        if cpu is None:
            return [Content.styled("CPU statistics unavailable", "$warning")]
        limit = limit_line(snapshot.jobs, len(cpu.cores) or snapshot.host.logical_cpus)
        head = [summary_line(cpu, width), *([_limit(*limit, width)] if limit else [])]
        return [*head, *core_grid(cpu.cores, width)]


def _limit(text: str, throttled: bool, width: int) -> Content:
    """The attached job's cgroup limit, in the warning colour while its quota throttles it."""
    line = Content.styled(text, "$warning" if throttled else "dim")
    return line if len(text) <= width else line.truncate(width, ellipsis=True)


def core_grid(cores: tuple[CpuCore, ...], width: int) -> list[Content]:
    """The densest-needed layout of ``cores`` into lines of at most ``width`` cells."""
    if not cores:
        return []
    rows = math.ceil(len(cores) / max(1, (width + 1) // (_BAR_CELL_MIN + 1)))
    if rows <= MAX_ROWS:
        return _grid(cores, rows, width, _bar_cell)
    rows = math.ceil(len(cores) / max(1, (width + 1) // (_COMPACT_CELL + 1)))
    if rows <= MAX_ROWS:
        return _grid(cores, rows, width, _compact_cell)
    return heat_map(cores, width)


def _grid(cores: tuple[CpuCore, ...], rows: int, width: int, cell) -> list[Content]:
    """Fill column by column like htop, so core numbers run down each column."""
    columns = math.ceil(len(cores) / rows)
    cell_width = (width + 1) // columns - 1
    lines = []
    for row in range(rows):
        line = Line()
        for i in range(row, len(cores), rows):
            if i > row:
                line.add(" ")
            cell(line, cores[i], cell_width)
        lines.append(line.content())
    return lines


def _bar_cell(line: Line, core: CpuCore, width: int) -> None:
    bar = min(width - _BAR_CELL_EXTRA, _BAR_MAX)
    if core.user_pct is None and core.system_pct is None:
        segments = [(core.busy_pct, USER_STYLE)]
    else:
        segments = [
            (core.user_pct, USER_STYLE),
            (core.system_pct, SYSTEM_STYLE),
            (core.iowait_pct, IOWAIT_STYLE),
        ]
    percent = (fmt_pct(core.busy_pct) if core.busy_pct is not None else NA).rjust(5)
    stacked_meter(line.add(f"{core.index:>3}", "dim"), segments, bar)
    line.add(percent + " " * (width - bar - _BAR_CELL_EXTRA))


def _compact_cell(line: Line, core: CpuCore, width: int) -> None:
    percent = fmt_pct(core.busy_pct).rjust(width - 3)
    line.add(f"{core.index:>3}", "dim").add(percent, level_style(core.busy_pct))


def heat_map(cores: tuple[CpuCore, ...], width: int) -> list[Content]:
    """One block per core, height and colour by load; each line starts with its first index."""
    per_line = max(1, width - 4)
    lines = []
    for start in range(0, len(cores), per_line):
        line = Line().add(f"{start:>3} ", "dim")
        for core in cores[start : start + per_line]:
            block = sparkline([core.busy_pct], 1).replace(" ", "▁")
            line.add(block, level_style(core.busy_pct))
        lines.append(line.content())
    return lines


def summary_line(cpu: CpuSnapshot, width: int) -> Content:
    """Whole-machine bar, load average, frequency and core counts, htop's header in one line."""
    total = cpu.total
    segments = [
        (total.user_pct, USER_STYLE),
        (total.system_pct, SYSTEM_STYLE),
        (total.iowait_pct, IOWAIT_STYLE),
    ]
    if total.user_pct is None:
        segments = [(total.busy_pct, USER_STYLE)]
    load = NA if cpu.load_avg is None else " ".join(f"{v:.2f}" for v in cpu.load_avg)
    physical = f" ({cpu.physical_cores} cores)" if cpu.physical_cores else ""
    line = stacked_meter(Line().add("avg", "bold"), segments, max(10, min(30, width // 5)))
    line.add(fmt_pct(total.busy_pct).rjust(5), level_style(total.busy_pct))
    # Whole fields in order of importance, never one cut mid-word.
    extras: list[list[tuple[str, str]]] = [
        [("  load ", "dim"), (load, "")],
        [("  freq ", "dim"), (_frequency(cpu), "")],
        [(f"  {len(cpu.cores)} cpus{physical}", "")],
        _LEGEND,
    ]
    for extra in extras:
        if len(line) + sum(len(text) for text, _ in extra) > width:
            break
        for text, style in extra:
            line.add(text, style)
    content = line.content()
    return content if len(line) <= width else content.truncate(width)


def _frequency(cpu: CpuSnapshot) -> str:
    if cpu.freq_mhz is None:
        return NA
    top = f"/{cpu.freq_max_mhz / 1000:.1f}" if cpu.freq_max_mhz else ""
    return f"{cpu.freq_mhz / 1000:.1f}{top} GHz"
