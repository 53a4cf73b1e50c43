"""The host's memory and pressure over a window, summarised once for every rule that reads them.

Memory is judged on its newest reading and its trend (the collector's least-squares slope of
the last minute: a window of ten seconds is too short to tell a climb from page-cache noise);
swap traffic and PSI on their window means (they are rates over each tick already).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from traintop.collectors.memory_state import Pressure, PressureSet
from traintop.collectors.snapshot import Snapshot
from traintop.diagnosis.stats import mean_of


@dataclass(frozen=True, slots=True)
class Stall:
    """One resource's PSI over the window: the mean share of time some task stalled on it, and
    all non-idle tasks did (None: not reported)."""

    some: float | None
    full: float | None


@dataclass(frozen=True, slots=True)
class HostView:
    """The host's RAM as last read, the trend of what is available, swap-in, and PSI."""

    total_bytes: int
    available_bytes: int
    available_trend_bytes_per_s: float | None
    swap_in_bytes_per_s: float | None
    cpu: Stall | None
    memory: Stall | None
    io: Stall | None


def stall_of(readings: Sequence[Pressure | None]) -> Stall | None:
    """Window means of a series of pressure readings (None where none was had)."""
    got = [p for p in readings if p is not None]
    if not got:
        return None
    return Stall(mean_of(p.some for p in got), mean_of(p.full for p in got))


def stalls(sets: Sequence[PressureSet | None]) -> tuple[Stall | None, Stall | None, Stall | None]:
    """``(cpu, memory, io)`` window means of a series of PSI readings."""
    kept = [s for s in sets if s is not None]
    pick: list[Callable[[PressureSet], Pressure | None]] = [
        lambda s: s.cpu, lambda s: s.memory, lambda s: s.io,
    ]  # fmt: skip
    cpu, memory, io = (stall_of([get(s) for s in kept]) for get in pick)
    return cpu, memory, io


def host_view(snaps: Sequence[Snapshot]) -> HostView | None:
    """The window's host side (None: no memory reading in it)."""
    latest = next((s.memory for s in reversed(snaps) if s.memory is not None), None)
    if latest is None:
        return None
    cpu, memory, io = stalls([s.pressure for s in snaps])
    swap_in = mean_of(s.memory.swap_in_bytes_per_s for s in snaps if s.memory is not None)
    return HostView(
        total_bytes=latest.total_bytes,
        available_bytes=latest.available_bytes,
        available_trend_bytes_per_s=latest.available_trend_bytes_per_s,
        swap_in_bytes_per_s=swap_in,
        cpu=cpu,
        memory=memory,
        io=io,
    )
