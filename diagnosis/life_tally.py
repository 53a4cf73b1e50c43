"""What explained a run's time while it ran: its final word, once it ended.

An ended job's verdict used to be the last one shown, or a new judgement of its last ring
numbers: a job that read ``compute`` for minutes and was stopped with Ctrl+C ended "no
bottleneck found in its last numbers", and one stopped while rank 0 wrote a checkpoint behind a
barrier ended "was network: communication-bound 26 %", a reading of its last seconds.  The tally
counts, per rank process, how long each bottleneck was the shown verdict of its job while it
ran (``unknown`` while the data was too short counts for nothing), and keeps the newest finding
of each; the bottleneck that held longest is the run's final word.

Kept per pid, not per job id or pid set: a run's id gains its token once its ranks agree on it,
and its ranks appear one by one, but a rank's pid is its own for the run's life.  Time comes
from the snapshots' monotonic stamps; a gap longer than ``MAX_STEP_S`` (a suspended monitor)
counts as ``MAX_STEP_S``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from traintop.diagnosis.model import Finding

MAX_STEP_S = 30.0
MAX_PIDS = 512  # ranks remembered (the oldest forgotten first)
NOTHING = "unknown"


@dataclass(slots=True)
class _Life:
    seconds: dict[str, float] = field(default_factory=dict)
    findings: dict[str, Finding] = field(default_factory=dict)
    shown: str | None = None
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Life:
    """The bottleneck that explained most of a run's time, its newest finding, and how long."""

    finding: Finding
    seconds: float
    total_s: float


class LifeTally:
    """Fed each live job's shown verdict; asked for a run's life once it ended."""

    def __init__(self) -> None:
        self._lives: dict[int, _Life] = {}

    def add(self, pids: Iterable[int], shown: Finding, now: float) -> None:
        """``shown`` is the verdict shown now for the job of ``pids``: the time since the last
        call goes to what was shown then."""
        for pid in pids:
            life = self._lives.pop(pid, None) or _Life(at=now)
            self._lives[pid] = life  # the newest last: the oldest is forgotten first
            if life.shown is not None and now > life.at:
                spent = min(now - life.at, MAX_STEP_S)
                life.seconds[life.shown] = life.seconds.get(life.shown, 0.0) + spent
            life.shown, life.at = shown.bottleneck, now
            life.findings[shown.bottleneck] = shown
        while len(self._lives) > MAX_PIDS:
            del self._lives[next(iter(self._lives))]

    def life(self, pids: Iterable[int]) -> Life | None:
        """The run of ``pids`` as its longest-lived rank saw it: what held longest (anything
        but ``unknown``; the last one shown among equals); None when nothing else was ever
        shown of it."""
        lives = [self._lives[p] for p in pids if p in self._lives]
        if not lives:
            return None
        longest = max(lives, key=lambda life: sum(life.seconds.values()))
        held = dict(longest.seconds)
        if longest.shown is not None:  # shown until the end: it counts, if only as a tie-break
            held.setdefault(longest.shown, 0.0)
        held.pop(NOTHING, None)
        if not held:
            return None
        top = max(held, key=lambda k: (held[k], k == longest.shown))
        return Life(longest.findings[top], held[top], sum(longest.seconds.values()))
