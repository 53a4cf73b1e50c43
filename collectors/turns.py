"""Which live ranks are read and summarised on a tick: every one up to 16, in turns beyond.

Following a rank costs the same whatever it did: a poll of its segment (system calls, parsing,
validation) and a summary of its window (percentiles, phase shares, one ``JobSnapshot``), about
0.13-0.19 ms a tick on a 2-core VM.  With 8 jobs of 8 ranks that was about a third of the
monitor's CPU (10-12 ms a tick).  Yet a rank's figures are means and percentiles over a 10 s
window, which a second's more steps barely moves, and a person reads one job at a time.  So beyond
``RANKS_PER_TICK`` live ranks each rank has its turn every ``rounds()`` ticks and keeps its last
snapshot in between, the job the user looks at (``focus``) on every tick; the verdict is
judged on the same cadence (``diagnosis/verdict_window.py``).  A job of up to 16 ranks has its
turn whole, so its row compares ranks as of one tick.  Between turns only the writer's lock is
looked at (two system calls), so a job that ends, crashes or stalls takes its turn at once;
and no snapshot is carried ``MAX_HOLD_S`` or more, whatever the interval.
"""

from __future__ import annotations

import math
from collections import Counter
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
    last: Sequence[float | None],
    jobs: Sequence[str],
    focus: str | None,
    now: float,
    interval_s: float | None,
) -> list[bool]:
    """For each live rank, whether it is read and summarised on this tick.

    ``last``: when each was last summarised (None: never, so now); ``jobs``: each one's job,
    the ranks of a job next to each other; ``focus``: the job on screen, summarised every tick.
    The others share the turns: those held ``MAX_HOLD_S`` go first, then the longest waiting,
    up to an even share of them per tick, rounded up to whole jobs of up to 16 ranks.
    """
    ticks = rounds(len(last), interval_s)
    if ticks == 1:
        return [True] * len(last)
    due = [
        job == focus or t is None or now - t >= MAX_HOLD_S
        for t, job in zip(last, jobs, strict=True)
    ]
    others = [i for i, job in enumerate(jobs) if job != focus]
    room = math.ceil(len(others) / ticks) - sum(due[i] for i in others)
    # a job that is not due was shown before: its time is known (never None)
    waiting = sorted((i for i in others if not due[i]), key=lambda i: last[i] or 0.0)
    for i in _whole_jobs(waiting, max(0, room), jobs, due):
        due[i] = True
    return due


def _whole_jobs(waiting: list[int], room: int, jobs: Sequence[str], due: list[bool]) -> list[int]:
    """The first ``room`` of ``waiting``, and the rest of each job of at most
    ``RANKS_PER_TICK`` ranks that has a rank due (a bigger one takes its turns in parts).  The
    ranks of a job found on different ticks, or held too long apart, so come to share turns."""
    taken = waiting[:room]
    sizes = Counter(jobs)
    started = [i for i, d in enumerate(due) if d] + taken
    touched = {jobs[i] for i in started if sizes[jobs[i]] <= RANKS_PER_TICK}
    return taken + [i for i in waiting[room:] if jobs[i] in touched]
