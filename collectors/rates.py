"""Pure rate math over cumulative counters.

Every host metric the kernel exposes is a monotonic counter (bytes, packets, jiffies, ms of busy
time); a rate needs two readings and the time between them.  Keeping the arithmetic here, free of
I/O, lets the collectors stay thin and lets the tricky cases (first reading, counter wrap, counter
reset, devices that come and go) be tested as tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol, TypeVar

K = TypeVar("K")

_WIDTHS = (32, 64)
"""Counter widths the kernel wraps at: 32-bit on 32-bit kernels and old NIC drivers, else 64."""


def counter_delta(prev: int | float, cur: int | float) -> int | float | None:
    """Increase of a monotonic counter from ``prev`` to ``cur``; ``None`` when it was reset.

    A decrease is either a wrap (the counter overflowed its width) or a reset (driver reload,
    device re-plugged).  A wrap is accepted only when the wrapped delta is less than half the
    counter's range: a genuine wrap between two ticks is a small step past the top, while a reset
    from a modest value would look like an absurd jump of almost the whole range.
    """
    if cur >= prev:
        return cur - prev
    for bits in _WIDTHS:
        span = 1 << bits
        if prev < span:
            wrapped = cur + span - prev
            return wrapped if wrapped < span // 2 else None
    return None


def rate(
    prev: int | float | None, cur: int | float | None, dt: float, scale: float = 1.0
) -> float | None:
    """Per-second rate of a counter, times ``scale`` (100: CPU seconds a second as a percent);
    ``None`` on the first reading, ``dt <= 0`` or a reset.  Scaled before ``measured`` rounds,
    so the reading is rounded once."""
    if prev is None or cur is None or dt <= 0:
        return None
    delta = counter_delta(prev, cur)
    return None if delta is None else measured(scale * delta / dt)


MEASURED_DIGITS = 6
"""Significant digits a derived reading keeps: finer than any source (a jiffy of 256 cores'
second is 0.004 % of it, NVML counts whole percents and MHz) and than the 4 digits a panel draws,
coarser than the float noise of dividing by an interval the clock read microseconds off."""


def measured(value: float) -> float:
    """``value`` to ``MEASURED_DIGITS`` significant digits, rounded where the reading is made.

    A recording keeps every value exactly, so replay draws what the live panels drew (rounding
    only when writing put 850.04999 MB/s, drawn "850.0" live, at 850.05, drawn "850.1"); the
    noise digits dropped here are also the ones no compressor can shrink.
    """
    return float(_MEASURED % value)


_MEASURED = f"%.{MEASURED_DIGITS}g"  # a fixed format: a nested f-string spec costs 45 % more


def rates_by_key(
    prev: Mapping[K, int | float], cur: Mapping[K, int | float], dt: float
) -> dict[K, float | None]:
    """Rates for every key in ``cur``: a key new this tick gets ``None``, a vanished one is dropped.

    Disks and NICs appear (hot-plug, a container starting its veth) and vanish between ticks; the
    result follows ``cur`` so a vanished device disappears from the display at once.
    """
    return {key: rate(prev.get(key), value, dt) for key, value in cur.items()}


class CpuTimes(Protocol):
    """The fields of ``psutil.cpu_times()`` we read; Linux adds the optional ones."""

    user: float
    system: float
    idle: float


class CpuUtil(NamedTuple):
    """Share of one CPU's (or all CPUs') time over an interval, in percent 0-100."""

    busy_pct: float
    user_pct: float
    system_pct: float
    iowait_pct: float | None


_GUEST_FIELDS = ("guest", "guest_nice")
"""Linux already counts guest time inside user/nice; summing it again would double-count it."""


def _field_deltas(prev: CpuTimes, cur: CpuTimes) -> dict[str, float]:
    """Per-field increase, clamped at 0: Linux's iowait (and idle on hotplug) can step backwards."""
    fields = getattr(cur, "_fields", ("user", "system", "idle"))
    return {f: max(0.0, getattr(cur, f) - getattr(prev, f)) for f in fields}


def cpu_util(prev: CpuTimes | None, cur: CpuTimes) -> CpuUtil | None:
    """Utilization between two ``cpu_times`` readings, split like htop's CPU bar.

    busy = everything except idle and iowait (iowait is idle time with I/O pending, as psutil and
    top count it); user includes nice; system includes irq and softirq.  ``None`` on the first
    reading or when no time passed (two readings within one jiffy).
    """
    if prev is None:
        return None
    deltas = _field_deltas(prev, cur)
    total = sum(v for f, v in deltas.items() if f not in _GUEST_FIELDS)
    if total <= 0:
        return None
    iowait = deltas.get("iowait")
    idle = deltas["idle"] + (iowait or 0.0)
    user = deltas["user"] + deltas.get("nice", 0.0)
    system = deltas["system"] + deltas.get("irq", 0.0) + deltas.get("softirq", 0.0)
    return CpuUtil(
        busy_pct=_pct(total - idle, total),
        user_pct=_pct(user, total),
        system_pct=_pct(system, total),
        iowait_pct=None if iowait is None else _pct(iowait, total),
    )


def _pct(part: float, total: float) -> float:
    """``part`` as a percentage of ``total``, clamped to 0-100 against rounding in the kernel.

    ``measured``: the times are whole jiffies turned into float seconds, and their differences
    carry noise that put 3 jiffies of 200 at 1.4999999999999998 %, drawn as "1%" where 1.5 is "2%".
    """
    return measured(min(100.0, max(0.0, 100.0 * part / total)))
