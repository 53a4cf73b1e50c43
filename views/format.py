"""Pure formatting helpers: units, bars, sparklines and colour choices for every panel.

Snapshots hold raw numbers in base units; this module is the one place that turns them into the
short strings a monitor shows, so every panel prints "n/a" and "GiB" the same way.
"""

from __future__ import annotations

from collections.abc import Iterable

from traintop.diagnosis.text import rate, scaled

NA = "n/a"
_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_SPARK_CHARS = " ▁▂▃▄▅▆▇█"
_EIGHTHS = " ▏▎▍▌▋▊▉"


def fmt_bytes(value: float | None) -> str:
    """Binary sizes (RAM, VRAM), like free -h: 1536 MiB -> "1.5 GiB"."""
    return NA if value is None else scaled(float(value), 1024, _BINARY_UNITS)


def fmt_gib(value: float | None) -> str:
    """A bare GiB number for "used/total" pairs where the unit is printed once."""
    return NA if value is None else f"{value / 2**30:.1f}"


def fmt_rate(value: float | None) -> str:
    """Decimal throughput like iostat and nload: 12_300_000 -> "12.3 MB/s"; the words the
    verdicts' evidence uses (``diagnosis.text.rate``), so a panel and its verdict agree."""
    return NA if value is None else rate(value)


def fmt_count(value: float | None) -> str:
    """Operation counts (IOPS, packets/s) shortened with k/M so columns stay narrow."""
    if value is None:
        return NA
    if abs(value) >= 999_500:  # compared as printed: "1.0M", never "1000k"
        return f"{value / 1e6:.1f}M"
    if abs(value) >= 9_999.5:
        return f"{value / 1e3:.0f}k"
    return f"{value:.0f}"


def fmt_pct(value: float | None, decimals: int = 0) -> str:
    """Percent with a fixed number of decimals: 45.26 -> "45%"."""
    return NA if value is None else f"{value:.{decimals}f}%"


def fmt_mhz(value: float | None) -> str:
    return NA if value is None else f"{value:.0f} MHz"


def fmt_watts(value: float | None) -> str:
    return NA if value is None else f"{value:.0f} W"


def fmt_celsius(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}°C"


def fmt_duration(seconds: float | None) -> str:
    """Uptime the way uptime(1) does: "3d 04:05", "04:05:06"."""
    if seconds is None:
        return NA
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}:{minutes:02d}"
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def fmt_interval(seconds: float) -> str:
    """Refresh interval as typed by users: 0.25 -> "0.25s", 1.0 -> "1s"."""
    return f"{seconds:g}s"


def truncate(text: str, width: int) -> str:
    """Cut to ``width`` cells with an ellipsis, so long commands never wrap a row."""
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"


def short_gpu_name(name: str | None) -> str:
    """Drop vendor words that every row repeats: "NVIDIA H100 80GB HBM3" -> "H100 80GB HBM3"."""
    if not name:
        return "GPU"
    for prefix in ("NVIDIA ", "GeForce ", "Tesla "):
        name = name.removeprefix(prefix)
    return name


def bar_cells(pct: float | None, width: int) -> str:
    """A smooth horizontal bar using eighth blocks; None draws an empty bar."""
    if width <= 0:
        return ""
    fraction = 0.0 if pct is None else min(max(pct, 0.0), 100.0) / 100
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[part] if part else "")
    return text.ljust(width)


def split_bar(segments: Iterable[float | None], width: int) -> list[int]:
    """Cell counts for stacked percent segments (htop's user/system/iowait), never over width."""
    counts: list[int] = []
    used = 0.0
    for pct in segments:
        used += min(max(pct or 0.0, 0.0), 100.0) / 100 * width
        counts.append(min(round(used), width) - sum(counts))
    return counts


def sparkline(values: Iterable[float | None], width: int, top: float = 100.0) -> str:
    """The last ``width`` values as block characters scaled to ``top``; gaps show as spaces."""
    tail = list(values)[-width:] if width > 0 else []
    chars = []
    for value in tail:
        if value is None or top <= 0:
            chars.append(" ")
            continue
        level = round(min(max(value / top, 0.0), 1.0) * (len(_SPARK_CHARS) - 1))
        chars.append(_SPARK_CHARS[level])
    return "".join(chars).rjust(width)


def level_style(pct: float | None, warn: float = 75.0, error: float = 90.0) -> str:
    """Theme colour for a load level: calm below ``warn``, then warning, then error."""
    if pct is None:
        return "dim"
    if pct >= error:
        return "$error"
    if pct >= warn:
        return "$warning"
    return "$success"


def temp_style(temp_c: float | None, slowdown_c: float | None) -> str:
    """Colour a GPU temperature against its own slowdown threshold, not a fixed number."""
    if temp_c is None:
        return "dim"
    limit = slowdown_c if slowdown_c is not None else 85.0
    if temp_c >= limit - 5:
        return "$error"
    if temp_c >= limit - 15:
        return "$warning"
    return "$success"


def fmt_number(value: float | None) -> str:
    """Rates with three significant digits: 3.21, 41.2, 1,644."""
    if value is None:
        return NA
    if abs(round(value, 2)) < 10:  # compared as printed: 9.999 is "10.0", never "10.00"
        return f"{value:.2f}"
    if abs(round(value, 1)) < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def fmt_seconds(seconds: float | None) -> str:
    """Step and wait times span microseconds to minutes: pick the unit that fits."""
    if seconds is None:
        return NA
    if abs(round(seconds * 1e6, 0)) < 1000:  # compared as printed: never "1000 µs", "1,000 ms"
        return f"{seconds * 1e6:.0f} µs"
    if abs(round(seconds * 1e3, 0)) < 1000:
        return f"{fmt_number(seconds * 1e3)} ms"
    return f"{fmt_number(seconds)} s"


def fmt_share(share: float | None) -> str:
    """A 0..1 share as a whole percent."""
    return NA if share is None else f"{share * 100:.0f}%"


def fmt_settled_age(seconds: float | None) -> str | None:
    """:func:`fmt_age` for the clock of something that no longer changes (an ended job): in
    10 s steps from 10 s to two minutes (then minutes, as fmt_age), the way ps shows old
    processes' start coarser.  Its row then repaints every ten seconds instead of every
    second, which for a sweep of ended runs was most of what their rows cost.
    """
    if seconds is not None and 10 <= seconds < 120:
        seconds = seconds // 10 * 10
    return fmt_age(seconds)


def fmt_age(seconds: float | None) -> str | None:
    """An age in words a table cell can hold: "34 s", "3 min", "2.5 h", "3.0 d"."""
    if seconds is None:
        return None
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
