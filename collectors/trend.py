"""A quantity's trend: the least-squares slope of its readings over the last minute.

A memory that fills up toward a limit does so in steps (a batch, an epoch's new pages, page
cache reclaimed); two readings give a rate of one step, the slope of a minute of them the
growth that predicts when the limit is reached.  Pure arithmetic and a bounded deque.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from itertools import pairwise

from traintop.collectors.rates import measured

TREND_S = 60.0  # the slope over this much of the newest readings
TREND_MIN_S = 1.8  # ... once they span at least this long (three readings about a second apart)
TREND_POINTS = 3  # readings a trend needs at least
STEADY = 2 / 3  # of the steps between readings that must go the slope's way


def trend(points: Iterable[tuple[float, float]]) -> float | None:
    """The least-squares slope of ``(t, value)`` points per second; None with fewer than three
    points, a span under ``TREND_MIN_S``, or steps that do not go the slope's way steadily
    (``STEADY`` of those that move: noise around a level, a sawtooth of allocations and frees,
    has a slope but no trend)."""
    pts = list(points)
    if len(pts) < TREND_POINTS or pts[-1][0] - pts[0][0] < TREND_MIN_S:
        return None
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mv = sum(v for _, v in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    if var <= 0:
        return None
    slope = sum((t - mt) * (v - mv) for t, v in pts) / var
    moves = [b[1] - a[1] for a, b in pairwise(pts) if b[1] != a[1]]
    if moves and sum((m > 0) == (slope > 0) for m in moves) < STEADY * len(moves):
        return None
    return measured(slope)


class History:
    """The newest ``TREND_S`` of one quantity's readings and its trend."""

    def __init__(self, span_s: float = TREND_S) -> None:
        self._span_s = span_s
        self._points: deque[tuple[float, float]] = deque()

    def add(self, now: float, value: float) -> float | None:
        """Keep ``value`` as of ``now``; the trend of what is kept."""
        points = self._points
        if points and now < points[-1][0]:
            points.clear()
        points.append((now, value))
        while points and now - points[0][0] > self._span_s:
            points.popleft()
        return self.trend()

    def trend(self) -> float | None:
        return trend(self._points)

    def __len__(self) -> int:
        return len(self._points)
