"""A live source's interval steps: the presets `+` and `-` move through, in the monitor and
the fleet view alike.  (What the app needs from a source is ``traintop.pipeline.source``.)"""

from __future__ import annotations

INTERVAL_STEPS_S: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0)


def next_interval(current: float, step: int) -> float:
    """The neighbouring preset interval (``step`` = +1 slower, -1 faster), clamped at the ends.

    Works from any current value, so a custom ``--interval 3`` still moves to 2 or 5.
    """
    if step > 0:
        larger = [s for s in INTERVAL_STEPS_S if s > current]
        return larger[0] if larger else INTERVAL_STEPS_S[-1]
    smaller = [s for s in INTERVAL_STEPS_S if s < current]
    return smaller[-1] if smaller else INTERVAL_STEPS_S[0]
