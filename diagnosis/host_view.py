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
from traintop.diagnosis.model import Evidence
from traintop.diagnosis.stats import mean_of
from traintop.diagnosis.text import pct


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


PSI_EVIDENCE = 0.10  # tasks stalled on a resource a tenth of the time: it explains a stall
WORDS = {"cpu": ("CPU", "waited for a CPU", "cpu"), "memory": ("memory", "stalled on memory",
         "memory"), "io": ("I/O", "stalled on I/O", "disk")}  # fmt: skip


def psi_evidence(own: PressureSet | None, host: HostView | None, resource: str) -> tuple:
    """``CPU pressure (PSI, its cgroup's): some task waited for a CPU 62 % of the time``: the
    job's own cgroup's PSI where cgroup v2 keeps it, else the host's, from ``PSI_EVIDENCE``."""
    mine = getattr(own, resource) if own is not None else None
    stall = Stall(mine.some, mine.full) if mine is not None and mine.some is not None else None
    whose = "its cgroup's" if stall is not None else "the host's"
    if stall is None and host is not None:
        stall = getattr(host, resource)
    if stall is None or stall.some is None or stall.some < PSI_EVIDENCE:
        return ()
    name, words, panel = WORDS[resource]
    text = f"{name} pressure (PSI, {whose}): some task {words} {pct(stall.some)} of the time"
    text += f", all tasks {pct(stall.full)}" if stall.full else ""
    return (Evidence(text, f"psi_{resource}_some", stall.some, panel),)
