"""The memory panel (key 3): RAM and swap bars plus swap traffic, which shows real pressure."""

from __future__ import annotations

from textual.content import Content

from traintop.collectors.snapshot import MemorySnapshot, Snapshot
from traintop.tui.line import Line
from traintop.tui.widgets.bars import stacked_meter
from traintop.tui.widgets.panel import Panel
from traintop.views.format import fmt_bytes, fmt_gib, fmt_pct, fmt_rate, level_style

_TEXT_WIDTH = 44  # label, " 184.7/503.5 GiB  37%" and " avail 318 GiB"


class MemoryPanel(Panel):
    """Used (load colour) and cached (secondary colour) RAM in one bar; swap and its traffic."""

    KEY = "3"
    TITLE = "Memory"

    def build_lines(self, snapshot: Snapshot, width: int) -> list[Content]:
        memory = snapshot.memory
        if memory is None:
            return [Content.styled("memory statistics unavailable", "$warning")]
        bar = max(4, min(40, width - _TEXT_WIDTH))
        return [ram_line(memory, bar), swap_line(memory, bar)]


def _pct(part: float | None, whole: float) -> float | None:
    return None if part is None or whole <= 0 else part / whole * 100


def ram_line(memory: MemorySnapshot, bar: int) -> Content:
    used_pct = _pct(memory.used_bytes, memory.total_bytes)
    cached_pct = _pct(memory.cached_bytes, memory.total_bytes)
    line = Line().add("Mem", "bold")
    stacked_meter(line, [(used_pct, level_style(used_pct)), (cached_pct, "$secondary")], bar)
    line.add(f" {fmt_gib(memory.used_bytes)}/{fmt_gib(memory.total_bytes)} GiB")
    line.add(f" {fmt_pct(used_pct):>4}", level_style(used_pct))
    return line.add("  avail ", "dim").add(fmt_bytes(memory.available_bytes)).content()


def swap_line(memory: MemorySnapshot, bar: int) -> Content:
    line = Line().add("Swp", "bold")
    if memory.swap_total_bytes <= 0:
        return swap_rates(line.add(" no swap", "dim"), memory).content()
    used_pct = _pct(memory.swap_used_bytes, memory.swap_total_bytes)
    stacked_meter(line, [(used_pct, level_style(used_pct, 25, 60))], bar)
    line.add(f" {fmt_gib(memory.swap_used_bytes)}/{fmt_gib(memory.swap_total_bytes)} GiB")
    line.add(f" {fmt_pct(used_pct):>4}")
    return swap_rates(line, memory).content()


def swap_rates(line: Line, memory: MemorySnapshot) -> Line:
    """Append swap traffic, in the error colour while the box is actively swapping."""
    swapping = any(rate for rate in (memory.swap_in_bytes_per_s, memory.swap_out_bytes_per_s))
    style = "bold $error" if swapping else ""
    line.add("  in ", "dim").add(fmt_rate(memory.swap_in_bytes_per_s), style)
    return line.add(" out ", "dim").add(fmt_rate(memory.swap_out_bytes_per_s), style)
