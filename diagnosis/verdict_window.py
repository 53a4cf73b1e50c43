"""The rolling window of snapshots and the stabiliser that judges it, fed one snapshot a tick.

The monitor, the recorder and the exporter all diagnose the same way: the last 30 s of
snapshots, held against flicker, an engine error turned into an ``unknown`` verdict so that
delivery goes on.  One class does it for all three.  It is thread-confined: only the thread
that delivers snapshots calls :meth:`VerdictWindow.update`, so the stateful
:class:`~traintop.diagnosis.stabilizer.VerdictStabilizer` and the window need no locks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import TypeVar

from traintop.collectors.snapshot import JobSnapshot, Snapshot
from traintop.collectors.turns import MAX_HOLD_S, rounds
from traintop.diagnosis.model import LIVE_STATES, Finding, JobVerdict, Verdict
from traintop.diagnosis.stabilizer import VerdictStabilizer

WINDOW_S = 30.0
# At the fastest interval (0.25 s) 30 s would be 120 snapshots; 40 still span 10 s, the
# engine's full-confidence window, at a third of the cost.
MAX_SNAPSHOTS = 40
JUDGE_EVERY_S = 2.0
"""The most often a window is judged while nothing starts, ends or stalls."""
# Judged every tick, one 8-rank job's diagnosis took 2.3 ms of the sampler's 7.5 ms a tick, and
# 64 ranks' (a context and every rule per rank) a fifth of the monitor's CPU.  Yet the window
# gains one snapshot in thirty a tick, and a shown verdict moves no faster than the stabilizer's
# 3 s hold.  So the window is judged every JUDGE_EVERY_S (every other tick at 1 s, every 8th at
# 0.25 s, every tick from 2 s up) and, beyond 16 ranks, on the ranks' cadence (``rounds(ranks)``
# ticks apart, collectors/turns.py: most of their snapshots are carried from an earlier tick
# anyway), never more than MAX_HOLD_S apart; between judgments the last verdict stands, its
# "for N s" still counting.  A job that starts, ends or stalls is judged at once, and so is every
# tick while the window is too short for a verdict.


def stall_level(job: JobSnapshot) -> int:
    """0 stepping, 1 past its stall limit, 2 past its hang limit: a job is judged on the tick
    it crosses one (its verdict must not wait for the cadence)."""
    age = job.last_step_age_s
    if age is None or job.stall_after_s is None or age < job.stall_after_s:
        return 0
    return 2 if job.hang_after_s is not None and age >= job.hang_after_s else 1


def cadence(live: int, interval_s: float) -> int:
    """Ticks from one judgment to the next with ``live`` ranks at ``interval_s``."""
    every = max(1, round(JUDGE_EVERY_S / interval_s)) if interval_s > 0 else 1
    return max(every, rounds(live, interval_s))


Held = TypeVar("Held", Verdict, JobVerdict)


def _held_longer(verdict: Held, seconds: float) -> Held:
    """``verdict`` with its primary held ``seconds`` longer (unchanged when nothing is held)."""
    if verdict.since_s is None:
        return verdict
    return replace(verdict, since_s=verdict.since_s + seconds)


def failed_verdict(error: Exception, window_s: float) -> Verdict:
    """What is shown if the engine raises: a bug in a rule must not stop delivery."""
    text = f"diagnosis failed: {type(error).__name__}: {error}"
    return Verdict(Finding("unknown", 0.0, "info", text), (), "system", window_s, None)


class VerdictWindow:
    """Owns the window and the stabilizer; one thread alone calls ``update``."""

    def __init__(
        self,
        *,
        job_pid: int | None = None,
        window_s: float = WINDOW_S,
        stabilizer: VerdictStabilizer | None = None,
    ) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self._job_pid = job_pid
        self._window_s = window_s
        self._stabilizer = stabilizer or VerdictStabilizer()
        self._window: deque[Snapshot] = deque(maxlen=MAX_SNAPSHOTS)
        self._last: tuple[Verdict, float, tuple] | None = None  # verdict, when, jobs judged
        self._skipped = 0

    def update(self, snapshot: Snapshot) -> Verdict:
        """Add ``snapshot`` to the window and diagnose it when due (see the cadence above);
        engine errors become the verdict."""
        self._remember(snapshot)
        jobs = tuple((j.pid, j.job_id, j.state, stall_level(j)) for j in snapshot.jobs)
        if not self._due(jobs, snapshot.monotonic, snapshot.interval_s):
            self._skipped += 1
            return self._carried(snapshot.monotonic)
        verdict = self._judge()
        self._last, self._skipped = (verdict, snapshot.monotonic, jobs), 0
        return verdict

    def _due(self, jobs: tuple, now: float, interval_s: float) -> bool:
        """Whether this tick is judged: the last judgment was still collecting data (its "N of
        3 s" counts every tick, and the first verdict comes as soon as it can), the jobs
        changed, the cadence's turn came, or the last verdict has been held ``MAX_HOLD_S``."""
        last = self._last
        if last is None or last[0].window_s < self._stabilizer.min_window_s:
            return True
        if jobs != last[2] or now - last[1] >= MAX_HOLD_S:
            return True
        live = sum(state in LIVE_STATES for _, _, state, _ in jobs)
        return self._skipped + 1 >= cadence(live, interval_s)

    def _carried(self, now: float) -> Verdict:
        """The last verdict, it and each job's held for as much longer as has passed since it
        was judged (the exporter publishes every job's ``since_s``)."""
        assert self._last is not None  # a tick is carried only when one was judged before
        verdict, judged_at, _ = self._last
        per_job = tuple(_held_longer(job, now - judged_at) for job in verdict.per_job)
        return _held_longer(replace(verdict, per_job=per_job), now - judged_at)

    def _judge(self) -> Verdict:
        window = tuple(self._window)
        try:
            return self._stabilizer.update(window, job_pid=self._job_pid)
        except Exception as error:  # shown as the verdict; delivery goes on
            return failed_verdict(error, window[-1].monotonic - window[0].monotonic)

    def _remember(self, snapshot: Snapshot) -> None:
        """Keep the last ``window_s`` seconds (at most ``MAX_SNAPSHOTS``); a clock that went
        back starts a new window."""
        window = self._window
        if window and snapshot.monotonic < window[-1].monotonic:
            window.clear()
            self._last = None
        window.append(snapshot)
        while snapshot.monotonic - window[0].monotonic > self._window_s:
            window.popleft()
