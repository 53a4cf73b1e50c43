"""Where a rank's time goes: its step split by phase, and its long steps' excess split the same way.

The rules each measure a symptom, and two symptoms can be the same lost time seen twice: a
loader that delivers batches in bursts makes every other step long, and the long steps' excess
*is* the wait for data; a rank that waits on a straggler spends that time in the collective.
So the time is accounted once, here, and each rule claims only the part its cause explains
(docs/diagnosis.md, "The time budget").  A step is the sum of its phases (the probe books every
nanosecond of it to exactly one), so shares of the summed phase time are shares of the time.

Long steps are those over ``LONG_FACTOR`` times the window's median step.  Each one's excess over
the median is split by the phases it fell in: a phase's part is how far it ran over its own
median in that step, scaled so that the parts add up to the step's excess.  Where the summaries
carry no per-step split (an older writer, a recording), the excess is split in proportion to
the phases' shares of the time: exact for a wait that is the same in every step, and for a
wait that falls only in the long steps (a burst-fed loader) it errs toward blaming the wait.

A long step whose excess is mostly work (outside the waits) is a pause: an evaluation pass, a
checkpoint, a logging burst.  Its wait for data is then the pause's own (an evaluation loads its
batches through a DataLoader the probe times as the loop's), not the loader's: ``paused_wait``
gives it to the pause.  A burst-fed loader's long steps are waits with the rest at its medians.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from traintop.collectors.phase_names import is_comm_phase
from traintop.collectors.snapshot import PhaseShare
from traintop.diagnosis.views import Steps

LONG_FACTOR = 3.0  # a step this many times the median is long (checkpoints: 10-100x)
MIN_STEPS = 10  # fewer steps say nothing about which are long
DATA_PHASE = "data"  # the probe's name for the wait on the next batch
PAUSE_WORK = 1 / 3  # a long step with this much of its overrun outside the waits is a pause


@dataclass(frozen=True, slots=True)
class Excess:
    """The window's long steps: how many, and what they cost beyond the median step."""

    count: int  # long steps
    steps: int  # steps in the window
    median_s: float
    longest_s: float
    share: float  # their excess over the median, as a share of all the window's step time
    by_phase: dict[str, float]  # that share split by phase name (adds up to ``share``)
    time_share: float = 0.0  # the long steps' whole time, as a share of the window's
    paused_wait: float = 0.0  # the part of ``by_phase``'s waits in long steps that are pauses

    def outside(self, names: Sequence[str]) -> float:
        """The part of the excess that fell outside the phases ``names``."""
        return max(0.0, self.share - sum(self.by_phase.get(n, 0.0) for n in names))


@dataclass(frozen=True, slots=True)
class Budget:
    """One rank's time over the window: the share of each phase, and its long steps."""

    shares: dict[str, float]  # by phase name, adding up to 1 (the newest summary's window)
    excess: Excess | None  # None: too few steps, or none long

    @property
    def waits(self) -> tuple[str, ...]:
        """The phases that wait on something else: the next batch, or the peers."""
        return tuple(n for n in self.shares if is_wait(n))


def is_wait(name: str) -> bool:
    """Whether a phase is time spent waiting for another party (input, peers)."""
    return name == DATA_PHASE or is_comm_phase(name)


def budget_of(phases: Sequence[PhaseShare], steps: Steps | None) -> Budget | None:
    """The budget of a rank from its newest phase shares and the window's steps (None:
    nothing timed yet).  Without phases, long steps are still found, their excess unsplit."""
    shares = {p.name: p.share for p in phases}
    excess = _long_steps(steps, shares) if steps is not None else None
    if not shares and excess is None:
        return None
    return Budget(shares, excess)


def _long_steps(steps: Steps, shares: dict[str, float]) -> Excess | None:
    """The excess of the window's long steps, split by phase (None: none long)."""
    if steps.count < MIN_STEPS or steps.longest <= LONG_FACTOR * steps.shortest:
        return None  # no step beyond 3x the median (never below the shortest): no sort needed
    times = steps.times
    mid = median(times)
    slow = [i for i, t in enumerate(times) if t > LONG_FACTOR * mid]
    total = sum(times)
    if not slow or total <= 0.0:
        return None
    excess = [times[i] - mid for i in slow]
    columns = steps.phase_times
    names = tuple(shares)
    paused = 0.0
    if columns is not None and len(columns) == len(names):
        overs = over_medians(columns, slow)
        by_phase = split_by_phase(names, overs, excess)
        paused = paused_wait(names, overs, excess)
    else:
        by_phase = {n: sum(excess) * share for n, share in shares.items()}
    parts = {n: part / total for n, part in by_phase.items()}
    spent = sum(times[i] for i in slow) / total
    return Excess(len(slow), len(times), mid, max(times), sum(excess) / total, parts, spent,
                  paused / total)  # fmt: skip


def over_medians(columns: Sequence[Sequence[float]], slow: Sequence[int]) -> list[list[float]]:
    """How far each phase of each long step ran over that phase's median (a list a step)."""
    medians = [median(column) for column in columns]
    return [[max(0.0, c[i] - m) for c, m in zip(columns, medians, strict=True)] for i in slow]


def split_by_phase(
    names: Sequence[str], overs: Sequence[Sequence[float]], excess: Sequence[float]
) -> dict[str, float]:
    """Seconds of the long steps' excess in each phase: a step's excess is shared among the
    phases in proportion to how far each ran over its own median (``overs``; a step whose
    phases all ran at their medians, which cannot add up to a long step, books it to
    ``other``)."""
    parts = dict.fromkeys(names, 0.0)
    unaccounted = "other" if "other" in parts else names[-1]
    for over, extra in zip(overs, excess, strict=True):
        spread = sum(over)
        if spread <= 0.0:
            parts[unaccounted] += extra
            continue
        for name, part in zip(names, over, strict=True):
            parts[name] += extra * part / spread
    return parts


def paused_wait(
    names: Sequence[str], overs: Sequence[Sequence[float]], excess: Sequence[float]
) -> float:
    """Seconds of the long steps' excess in the waits that belong to pauses: the wait part of
    each long step at least ``PAUSE_WORK`` of whose overrun is outside the waits."""
    waits = [is_wait(name) for name in names]
    paused = 0.0
    for over, extra in zip(overs, excess, strict=True):
        spread = sum(over)
        waited = sum(part for part, wait in zip(over, waits, strict=True) if wait)
        if spread > 0.0 and spread - waited >= PAUSE_WORK * spread:
            paused += extra * waited / spread
    return paused
