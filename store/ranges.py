"""Times inside a recording as people type them: durations, clock times and ``FILE@A..B``.

``10m``, ``1h30m``, ``90s``, ``90`` and ``1:30:00`` are durations.  In a range, an offset is
counted from the recording's first sample; an empty side means that end of the recording, so
``run.ttrec@10m..`` is everything after the first ten minutes.  ``HH:MM[:SS]`` in ``goto`` is a
wall-clock time on the recording's day.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from traintop.store.schema import StoreError

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([hms]?)")
_RANGE = re.compile(r"^(?P<path>.+)@(?P<a>[^@/]*?)\.\.(?P<b>[^@/]*)$")


def parse_duration(text: str) -> float:
    """Seconds in ``10m``, ``1h30m``, ``90s``, ``90`` or ``1:30:00``; ValueError otherwise."""
    text = text.strip()
    if ":" in text:
        parts = [float(p) for p in text.split(":")]
        if len(parts) > 3:
            raise ValueError(text)
        return sum(v * 60**i for i, v in enumerate(reversed(parts)))
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos or (not match.group(2) and match.end() != len(text)):
            raise ValueError(text)
        total += float(match.group(1)) * _UNITS[match.group(2) or "s"]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {text!r}")
    return total


@dataclass(frozen=True, slots=True)
class Span:
    """A recording and the part of it to use, as offsets (seconds) from its first sample."""

    path: str
    start_s: float | None
    end_s: float | None

    def label(self) -> str:
        if self.start_s is None and self.end_s is None:
            return self.path
        return f"{self.path}@{_fmt(self.start_s)}..{_fmt(self.end_s)}"


def parse_span(text: str) -> Span:
    """``FILE`` or ``FILE@START..END``; a one-line StoreError for a malformed range."""
    match = _RANGE.match(text)
    if match is None:
        return Span(text, None, None)
    try:
        a = parse_duration(match["a"]) if match["a"] else None
        b = parse_duration(match["b"]) if match["b"] else None
    except ValueError:
        raise StoreError(f"{text}: a range is FILE@START..END, e.g. run.ttrec@10m..20m") from None
    if a is not None and b is not None and b <= a:
        raise StoreError(f"{text}: the range ends before it starts")
    return Span(match["path"], a, b)


def parse_goto(text: str, start: float, end: float) -> float:
    """A wall-clock time for replay's `g`: ``HH:MM[:SS]`` on the recording's day(s), or an
    offset ``+10m`` / ``10m`` from the start, or ``-5m`` from the end."""
    text = text.strip()
    if text.startswith("-"):
        return end - parse_duration(text[1:])
    if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?", text):
        return _clock_time(text, start)
    return start + parse_duration(text.removeprefix("+"))


def _clock_time(text: str, start: float) -> float:
    """The first moment at or after the recording's start whose local clock reads ``text``."""
    seconds = parse_duration(text if text.count(":") == 2 else text + ":00")
    day = time.localtime(start)
    midnight = time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0, 0, 0, -1))
    moment = midnight + seconds
    return moment if moment >= start - 1 else moment + 86400


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds:g}s"
