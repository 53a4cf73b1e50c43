"""Number formatting for evidence sentences.

Evidence is read as a sentence in the banner and in ``traintop diagnose``, so the engine writes
it; these helpers keep every sentence in the same units (decimal rates, as iostat and ifstat).
"""

from __future__ import annotations

_RATE_UNITS = ("B/s", "kB/s", "MB/s", "GB/s", "TB/s")
_GIB = 1 << 30


def pct(share: float) -> str:
    """A 0..1 share as a whole percentage: ``0.62 -> "62 %"``."""
    return f"{share * 100:.0f} %"


def pct100(value: float) -> str:
    """A value already in percent: ``97.4 -> "97 %"``."""
    return f"{value:.0f} %"


def rate(bytes_per_s: float) -> str:
    """A byte rate with one decimal in the largest fitting decimal unit: ``3.1 MB/s``."""
    return scaled(float(bytes_per_s), 1000, _RATE_UNITS)


def scaled(value: float, base: float, units: tuple[str, ...]) -> str:
    """``value`` stepped up by ``base`` until it prints under it; the smallest unit has no
    decimals.  Compared as printed: 999,960 B/s is "1.0 MB/s", never "1000.0 kB/s" (a rate
    wobbling around a unit's edge would also flip a cell's width from tick to tick)."""
    for unit in units:
        decimals = 0 if unit == units[0] else 1
        if abs(round(value, decimals)) < base or unit == units[-1]:
            return f"{value:.{decimals}f} {unit}"
        value /= base
    raise AssertionError("unreachable")  # pragma: no cover


def seconds(value: float) -> str:
    """A duration short enough to read at a glance: ms below one second, compared as printed
    (0.9996 s is "1.0 s", never "1000 ms")."""
    return f"{value * 1000:.0f} ms" if round(value * 1000, 0) < 1000 else f"{value:.1f} s"


def gib(size_bytes: float) -> str:
    """Device memory in binary GiB with one decimal, as GPU cards are sold: ``79.5 GiB``."""
    return f"{size_bytes / _GIB:.1f} GiB"


def size(size_bytes: float) -> str:
    """Host memory in binary units: ``165 MiB`` below a GiB, ``7.9 GiB`` from it (compared as
    printed: 1023.6 MiB is "1.0 GiB")."""
    mib = size_bytes / (1 << 20)
    return f"{mib:.0f} MiB" if round(mib) < 1024 else gib(size_bytes)


def rank_list(ranks: list[int]) -> str:
    """Ranks as compact ranges, the way people say them: ``[0, 1, 2, 5] -> "0-2, 5"``."""
    parts: list[str] = []
    for r in sorted(set(ranks)):
        if parts and parts[-1].split("-")[-1] == str(r - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{r}"
        else:
            parts.append(str(r))
    return ", ".join(parts)


def duration(value: float | None) -> str:
    """A wait as a clock reads it, to the second: ``45s``, ``1m12s``, ``2h03m``."""
    if value is None:
        return "?"
    whole = int(max(value, 0.0))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def waits_in(count: int, ended: bool) -> str:
    """How ``count`` ranks are in a collective: "waits in", "wait in"; of an ended job, "was
    in", "were in"."""
    if ended:
        return "was in" if count == 1 else "were in"
    return "waits in" if count == 1 else "wait in"
