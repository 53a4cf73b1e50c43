"""One GPU as one line: which columns fit a given width, and the styled row itself.

Columns are added greedily in priority order.  80 columns show utilization, memory bandwidth
(``bw``: share of time device memory was read or written), SM active and tensor active (GPM,
Hopper and newer), memory as a percentage, temperature, power and the throttle badge; wider
terminals widen memory to GiB and power to its cap first, then add bars, clocks, SM occupancy and
DRAM bandwidth, PCIe and history.  ``util`` is the tick's mean of the driver's samples where it
has them (what happened over the whole tick, not its last 1/6 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from textual.content import Content

from traintop.collectors.gpu_reasons import SEVERITY_RANK, throttling_reasons
from traintop.collectors.snapshot import GpuSnapshot
from traintop.tui.line import Line
from traintop.tui.widgets.bars import meter
from traintop.views.format import (
    NA,
    fmt_celsius,
    fmt_gib,
    fmt_pct,
    fmt_rate,
    level_style,
    short_gpu_name,
    sparkline,
    temp_style,
    truncate,
)

# index, " util 97%", "  mem 88%", temperature, "  632W", the gap before the badge
_FIXED = 3 + 10 + 10 + 6 + 7 + 2
_BADGE_MIN = 12
# (column, cells it costs) in priority order; "badge" is the room the full throttle names need
# beyond the minimum, so at wide sizes they are never cut while PCIe and fan still fit later.
# "util+" and "mem+" widen bars that are already shown; "mem_gib" and "power_cap" widen the
# compact memory and power columns; "gpm" (SM and tensor active) and "gpm+" (occupancy, DRAM)
# cost nothing where no GPU has GPM.
_WANTS = (
    ("bw", 8),
    ("gpm", 16),
    ("mem_gib", 9),
    ("power_cap", 4),
    ("util", 8),
    ("mem", 8),
    ("badge", 0),
    ("clocks", 15),
    ("pcie", 25),
    ("fan", 9),
    ("spark", 18),
    ("pstate", 5),
    ("gpm+", 19),
    ("util+", 10),
    ("mem+", 10),
)


@dataclass(frozen=True, slots=True)
class GpuLayout:
    """Widths chosen for every row of one render, so the columns line up."""

    width: int
    name: int
    util_bar: int = 0
    mem_bar: int = 0
    bw: bool = False
    gpm: bool = False
    gpm_more: bool = False
    mem_gib: bool = False
    power_cap: bool = False
    clocks: bool = False
    pstate: bool = False
    pcie: bool = False
    fan: bool = False
    spark: int = 0
    badge: int = _BADGE_MIN


def plan_layout(width: int, badge_need: int = 0, fans: bool = True, gpm: bool = True) -> GpuLayout:
    """Pick the columns that fit ``width`` cells; what is left widens the throttle badge.

    ``badge_need`` is the widest badge of this frame, ``fans`` whether any GPU reports a fan
    (SXM boards have none, and a column of "n/a" on every row is noise) and ``gpm`` whether any
    reports GPM counters (older than Hopper: none).
    """
    # At 80 columns the counters matter more than the model's name, which every row repeats.
    name = 15 if width >= 116 else 9 if width >= (100 if gpm else 76) else 5
    free = width - _FIXED - name - _BADGE_MIN
    costs = dict(_WANTS, badge=max(badge_need - _BADGE_MIN, 0))
    chosen: dict[str, int] = {}
    for column, cost in costs.items():
        wanted = (fans or column != "fan") and (gpm or not column.startswith("gpm"))
        if wanted and cost <= free and (not column.endswith("+") or column[:-1] in chosen):
            chosen[column] = cost
            free -= cost
    return GpuLayout(
        width=width,
        name=name,
        util_bar=chosen.get("util", 2) - 2 + chosen.get("util+", 0),
        mem_bar=chosen.get("mem", 2) - 2 + chosen.get("mem+", 0),
        bw="bw" in chosen,
        gpm="gpm" in chosen,
        gpm_more="gpm+" in chosen,
        mem_gib="mem_gib" in chosen,
        power_cap="power_cap" in chosen,
        clocks="clocks" in chosen,
        pstate="pstate" in chosen,
        pcie="pcie" in chosen,
        fan="fan" in chosen,
        # Room left over lengthens the history when it is shown, else widens the badge.
        spark=chosen["spark"] - 2 + free if "spark" in chosen else 0,
        badge=max(_BADGE_MIN + chosen.get("badge", 0) + (0 if "spark" in chosen else free), 0),
    )


def gpu_row(gpu: GpuSnapshot, layout: GpuLayout, history: Sequence[float | None]) -> Content:
    """The full line for one GPU; a lost GPU becomes a single error-coloured LOST line."""
    line = Line().add(f"{gpu.index:>2} ")
    line.add(truncate(short_gpu_name(gpu.name), layout.name).ljust(layout.name), "bold")
    if gpu.lost:
        line.add(" LOST ", "bold $error").add(gpu.error or "GPU has fallen off the bus", "$error")
        return _fit(line, layout.width)
    _util(line, gpu, layout)
    _activity(line, gpu, layout)
    _memory(line, gpu, layout)
    line.add(fmt_celsius(gpu.temp_c).rjust(6), temp_style(gpu.temp_c, gpu.temp_slowdown_c))
    _power(line, gpu, layout.power_cap)
    _optional_columns(line, gpu, layout)
    if layout.spark:
        line.add("  ").add(sparkline(history, layout.spark), "$primary")
    badge, style = throttle_badge(gpu.clocks_event_reasons, layout.width - len(line) - 2)
    if badge:
        line.add("  ").add(badge, style)
    return _fit(line, layout.width)


def _fit(line: Line, width: int) -> Content:
    """The finished row, cut to ``width`` only when a column plan could not hold it."""
    content = line.content()
    return content if len(line) <= width else content.truncate(width)


def throttle_badge(mask: int | None, width: int) -> tuple[str, str]:
    """Active clock-limiting reasons in nvidia-smi words, worst first, and the severity style
    to draw them in ("" and "" when nothing limits the clocks).

    When the full names do not fit, "Slowdown" shortens to "Slow", then only the worst reason
    is named with a count of the others ("HW Slowdown +1"), so nothing is cut mid-word.
    """
    reasons = sorted(throttling_reasons(mask), key=lambda r: -SEVERITY_RANK[r.severity])
    if not reasons:
        return "", ""
    worst = reasons[0].severity
    style = {"error": "bold $error", "warning": "bold $warning"}.get(worst, "")
    names = [reason.name for reason in reasons]
    more = f" +{len(names) - 1}" if len(names) > 1 else ""
    tiers = (", ".join(names), ", ".join(names).replace("Slowdown", "Slow"), names[0] + more)
    fitting = [tier for tier in tiers if len(tier) <= width]
    text = fitting[0] if fitting else truncate(tiers[-1].replace("Slowdown", "Slow"), width)
    return text, style


def badge_need(gpus: Sequence[GpuSnapshot]) -> int:
    """Cells the widest full throttle badge of these GPUs needs (0 when none throttles)."""
    widths = (len(throttle_badge(gpu.clocks_event_reasons, 999)[0]) for gpu in gpus)
    return max(widths, default=0)


def gpu_util(gpu: GpuSnapshot) -> float | None:
    """The utilization to show: the tick's mean of the driver's samples, else its last period."""
    return gpu.util_gpu_mean_pct if gpu.util_gpu_mean_pct is not None else gpu.util_gpu_pct


def _util(line: Line, gpu: GpuSnapshot, layout: GpuLayout) -> None:
    pct = gpu_util(gpu)
    line.add(" util", "dim")
    if layout.util_bar:
        # High utilization is the goal in training, so it is not drawn as a warning.
        meter(line, pct, layout.util_bar, "$primary")
    line.add(" " + fmt_pct(pct).rjust(4))


def _activity(line: Line, gpu: GpuSnapshot, layout: GpuLayout) -> None:
    """Memory bandwidth, then what GPM says the SMs did (blank where the GPU has no GPM)."""
    cells = [("bw", gpu.util_mem_pct)] if layout.bw else []
    if layout.gpm:
        cells += [("sm", gpu.sm_active_pct), ("tc", gpu.tensor_active_pct)]
    if layout.gpm_more:
        cells += [("occ", gpu.sm_occupancy_pct), ("dram", gpu.dram_active_pct)]
    for label, pct in cells:
        line.add(" ").add(label, "dim").add(" " + fmt_pct(pct).rjust(4))


def _memory(line: Line, gpu: GpuSnapshot, layout: GpuLayout) -> None:
    used, total = gpu.mem_used_bytes, gpu.mem_total_bytes
    pct = used / total * 100 if used is not None and total else None
    line.add("  ").add("mem", "dim")
    if layout.mem_bar:
        # Training fills VRAM on purpose; only the last few percent before OOM are a warning.
        meter(line, pct, layout.mem_bar, level_style(pct, 95, 99))
    if not layout.mem_gib:
        line.add(" " + fmt_pct(pct).rjust(4), level_style(pct, 95, 99))
        return
    text = f"{fmt_gib(used)}/{fmt_gib(total)} GiB" if total is not None else NA
    line.add(" " + text.rjust(13))


def _power(line: Line, gpu: GpuSnapshot, cap: bool) -> None:
    cells = 11 if cap else 7
    if gpu.power_w is None:
        line.add(NA.rjust(cells))
        return
    limit = f"/{gpu.power_limit_w:.0f}" if cap and gpu.power_limit_w is not None else ""
    pct = gpu.power_w / gpu.power_limit_w * 100 if gpu.power_limit_w else None
    line.add(f"{gpu.power_w:.0f}{limit} W".rjust(cells), level_style(pct, 90, 98))


def _optional_columns(line: Line, gpu: GpuSnapshot, layout: GpuLayout) -> None:
    if layout.clocks:
        clock = NA if gpu.sm_clock_mhz is None else str(gpu.sm_clock_mhz)
        top = "" if gpu.sm_clock_max_mhz is None else f"/{gpu.sm_clock_max_mhz}"
        line.add(f"{clock}{top} MHz".rjust(15))
    if layout.pstate:
        line.add(("" if gpu.pstate is None else f"P{gpu.pstate}").rjust(5))
    if layout.pcie:
        rx, tx = fmt_rate(gpu.pcie_rx_bytes_per_s), fmt_rate(gpu.pcie_tx_bytes_per_s)
        line.add("  ↓", "dim").add(rx.rjust(10)).add(" ↑", "dim").add(tx.rjust(10))
    if layout.fan:
        line.add("  fan", "dim").add(fmt_pct(gpu.fan_pct).rjust(4))
