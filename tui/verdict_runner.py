"""Verdicts on the sampler thread: each snapshot is diagnosed before it is handed to the UI.

The verdict travels in the same message as its snapshot, so the UI thread applies panels,
banner and evidence marks in one ``batch_update()`` and paints one frame per tick; a verdict
arriving on its own, just after the snapshot's frame, cost a second full repaint every tick.
``diagnose()`` costs about a millisecond, which the sampler thread can spare and the UI thread
(keys, repaints) should not.  The runner is thread-confined: only the thread that delivers
snapshots calls :meth:`VerdictRunner.update`, so the stateful
:class:`~diagnosis.api.VerdictStabilizer`, the window and the history need no locks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from collectors.snapshot import Snapshot
from diagnosis.api import Finding, Verdict, VerdictStabilizer
from tui.verdict_history import VerdictPoint, extend, point_from

WINDOW_S = 30.0
# At the fastest interval (0.25 s) 30 s would be 120 snapshots; 40 still span 10 s, the
# engine's full-confidence window, at a third of the cost.
MAX_SNAPSHOTS = 40


@dataclass(frozen=True, slots=True)
class VerdictUpdate:
    """A stabilised verdict and the history up to it, ready for the UI to display."""

    verdict: Verdict
    history: tuple[VerdictPoint, ...]


def failed_verdict(error: Exception, window_s: float) -> Verdict:
    """What the banner shows if the engine raises: a bug must not stop snapshot delivery."""
    text = f"diagnosis failed: {type(error).__name__}: {error}"
    return Verdict(Finding("unknown", 0.0, "info", text), (), "system", window_s, None)


class VerdictRunner:
    """Owns the window, the stabilizer and the history; one thread alone calls ``update``."""

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
        self._history: tuple[VerdictPoint, ...] = ()
        self.runs = 0

    def update(self, snapshot: Snapshot) -> VerdictUpdate:
        """Add ``snapshot`` to the window and diagnose it; engine errors become the verdict."""
        self._remember(snapshot)
        window = tuple(self._window)
        self.runs += 1
        try:
            verdict = self._stabilizer.update(window, job_pid=self._job_pid)
        except Exception as error:  # shown in the banner; delivery goes on
            verdict = failed_verdict(error, window[-1].monotonic - window[0].monotonic)
        self._history = extend(self._history, point_from(snapshot, verdict, self._job_pid))
        return VerdictUpdate(verdict, self._history)

    def _remember(self, snapshot: Snapshot) -> None:
        """Keep the last ``window_s`` seconds (at most ``MAX_SNAPSHOTS``); a clock that went
        back starts a new window."""
        window = self._window
        if window and snapshot.monotonic < window[-1].monotonic:
            window.clear()
        window.append(snapshot)
        while snapshot.monotonic - window[0].monotonic > self._window_s:
            window.popleft()
