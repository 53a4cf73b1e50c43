"""Which live ranks are read and summarised on a tick: every one up to 16, in turns beyond.

Following a rank costs the same whatever it did: a poll of its segment (system calls, parsing,
validation) and a summary of its window (percentiles, phase shares, one ``JobSnapshot``), about
0.13 ms a tick on a 2-core VM.  With 8 jobs of 8 ranks that was more than the rest of the
monitor together.  Yet a rank's figures are means and percentiles over a 10 s window, which a
second's more steps barely moves, and a person reads one job at a time.  So beyond
``RANKS_PER_TICK`` live ranks each rank has its turn every ``rounds()`` ticks and keeps its last
snapshot in between, the job the user looks at (the *pinned* one) on every tick; the verdict is
judged on the same cadence (``diagnosis/verdict_window.py``).  Between turns only the writer's
lock is looked at (two system calls), so a job that ends, crashes or stalls takes its turn at
once; and no snapshot is carried ``MAX_HOLD_S`` or more, whatever the interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

RANKS_PER_TICK = 16
MAX_HOLD_S = 4.0
"""The oldest a carried snapshot or verdict may be shown, in seconds: at 1 s ticks a rank waits
at most 3 ticks for its turn, and at a slow interval (the exporter samples every 5 s) every
tick is every rank's turn."""


def rounds(live: int, interval_s: float | None = None) -> int:
    """Ticks it takes every one of ``live`` ranks to have its turn: 1 up to 16 ranks, then one
    more per 16, but never so many that a snapshot waits ``MAX_HOLD_S`` at ``interval_s``."""
    ticks = max(1, math.ceil(live / RANKS_PER_TICK))
    if interval_s is not None and interval_s > 0:
        ticks = min(ticks, max(1, math.ceil(MAX_HOLD_S / interval_s)))
    return ticks


def in_turn(
    last: Sequence[float | None], pinned: Sequence[bool], now: float, interval_s: float | None
) -> list[bool]:
    """For each live rank, whether it is read and summarised on this tick.

    ``last``: when each was last summarised (None: never, so now); ``pinned``: the ranks of the
    job on screen, summarised every tick.  The others share the turns: those held
    ``MAX_HOLD_S`` go first, then the longest waiting (ties in the given order, so a job's
    ranks keep their turns together) up to an even share of them per tick.
    """
    ticks = rounds(len(last), interval_s)
    if ticks == 1:
        return [True] * len(last)
    due = [p or t is None or now - t >= MAX_HOLD_S for t, p in zip(last, pinned, strict=True)]
    others = [i for i, p in enumerate(pinned) if not p]
    room = math.ceil(len(others) / ticks) - sum(due[i] for i in others)
    waiting = sorted((i for i in others if not due[i]), key=lambda i: last[i])
    for i in waiting[: max(0, room)]:
        due[i] = True
    return due
