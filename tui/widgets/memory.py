"""The memory panel (key 3): RAM and swap bars plus swap traffic, which shows real pressure;
the host's pressure stall information (PSI) where the kernel keeps it, and the memory cgroup of
each live job that has a limit (its use of it, its growth, its own PSI under cgroup v2)."""

from __future__ import annotations

from textual.content import Content

from traintop.collectors.memory_state import Pressure, PressureSet
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
        lines = [ram_line(memory, bar), swap_line(memory, bar)]
        if snapshot.pressure is not None:
            lines.append(psi_line("PSI", snapshot.pressure))
        return lines + job_lines(snapshot)


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


PSI_WARN = 10.0  # a resource some task stalled on a tenth of the time is worth the eye


def psi_line(label: str, pressure: PressureSet) -> Content:
    """``PSI cpu 34% mem 0% io 1%/0%``: the share of the last interval in which some task
    stalled on each resource (/all of them, where that happened), in the warning colour from
    a tenth of the time."""
    line = Line().add(label, "bold")
    for name, reading in (("cpu", pressure.cpu), ("mem", pressure.memory), ("io", pressure.io)):
        if reading is not None and reading.some is not None:
            _stall(line.add(f" {name} ", "dim"), reading)
    return line.content()


def _stall(line: Line, reading: Pressure) -> None:
    some = (reading.some or 0.0) * 100
    line.add(fmt_pct(some), level_style(some, PSI_WARN, 40.0))
    if reading.full:
        full = reading.full * 100
        line.add("/", "dim").add(fmt_pct(full), level_style(full, 5.0, 20.0))


def job_lines(snapshot: Snapshot) -> list[Content]:
    """One line per live job whose memory cgroup sets a limit: ``cg train 1.1/1.2 GiB 94%
    +343.0 MB/min``, then its cgroup's own PSI where cgroup v2 keeps it."""
    lines, seen = [], set()
    for job in snapshot.jobs:
        cgroup = job.memory.cgroup if job.memory is not None else None
        if job.state != "live" or cgroup is None or cgroup.cgroup in seen:
            continue
        seen.add(cgroup.cgroup)
        if cgroup.limit_bytes and cgroup.anon_bytes is not None:
            lines.append(_cgroup_line(job.name, cgroup.anon_bytes, cgroup.limit_bytes,
                                      cgroup.growth_bytes_per_s))  # fmt: skip
        if job.pressure is not None:
            lines.append(psi_line(f"    {job.name[:12]}", job.pressure))
    return lines


def _cgroup_line(name: str, used: int, limit: int, growth: float | None) -> Content:
    pct = used / limit * 100
    line = Line().add("cg", "bold").add(f" {name[:14]} ")
    line.add(f"{fmt_gib(used)}/{fmt_gib(limit)} GiB ").add(fmt_pct(pct), level_style(pct))
    if growth is not None and growth > 0:
        line.add(f" +{fmt_rate(growth * 60).removesuffix('/s')}/min", "$warning")
    return line.content()
