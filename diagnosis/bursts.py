"""Batches that arrive in bursts: the shape of a data wait that falls in every n-th step.

DataLoader workers each build whole batches; when each needs longer for one than the model
needs for a step, the workers finish at about the same moment, the trainer takes their batches
in a few short steps, then waits for the next round.  Half the steps (two workers) are long
and the other half short, so the median step jumps between the two from run to run, and a rule
judging "long steps" against it saw a periodic stall on some runs and not on others.  Named as
what it is, the figures say what to change: ``W workers x T per batch`` delivers W batches every
T, whatever the model does.

A step waits "long" when its data wait is at least half the window's 90th percentile wait: a
steady wait (every step waits about the same) has no long and short steps, so the bursts are
only called bursts when at most two thirds of the steps carry the waiting, a whole number of
steps per long wait, the long waits alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from traintop.diagnosis.text import seconds

LONG_PART = 0.5  # a wait at least this share of the 90th percentile wait is a long one
MIN_BURST = 1.5  # steps per long wait: below it the wait is steady, not bursty
MIN_STEPS = 10
ROUND_SLACK = 0.25  # a burst is a whole number of batches, give or take a stray step
SPREAD = 0.25  # ... and its waits are alike


@dataclass(frozen=True, slots=True)
class Bursts:
    """Batches arrive ``size`` at a time, a burst every ``every_s`` seconds."""

    size: float  # steps (batches) per long wait
    every_s: float
    per_batch_s: float | None  # what one worker takes per batch (None: no workers)
    workers: int

    @property
    def text(self) -> str:
        """``in bursts of 2 batches every 0.48 s: 2 workers × 0.48 s per batch``."""
        text = f"in bursts of {self.size:.0f} batches every {seconds(self.every_s)}"
        if self.per_batch_s is not None:
            text += f": {self.workers} workers × {seconds(self.per_batch_s)} per batch"
        return text


def bursts_of(waits: Sequence[float], steps: Sequence[float], workers: int) -> Bursts | None:
    """The burst pattern of a window's per-step data waits and step times (None: steady)."""
    if len(waits) < MIN_STEPS or len(waits) != len(steps):
        return None
    ordered = sorted(waits)
    top = ordered[int(0.9 * (len(ordered) - 1))]
    long = [w for w in waits if w >= LONG_PART * top] if top > 0 else []
    size = len(waits) / len(long) if long else 0.0
    if size < MIN_BURST or abs(size - round(size)) > ROUND_SLACK or not _regular(long):
        return None
    total = sum(steps)
    per_batch = workers * total / len(steps) if workers else None
    return Bursts(size, total / len(long), per_batch, workers)


def _regular(long: Sequence[float]) -> bool:
    """The long waits are alike (coefficient of variation within ``SPREAD``): rounds of
    batches, not waits of every length on a host too busy to keep time."""
    mean = sum(long) / len(long)
    spread = (sum((w - mean) ** 2 for w in long) / len(long)) ** 0.5
    return mean > 0 and spread <= SPREAD * mean
