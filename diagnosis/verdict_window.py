"""The rolling window of snapshots and the stabiliser that judges it, fed one snapshot a tick.

The monitor, the recorder and the exporter all diagnose the same way: the last 30 s of
snapshots, held against flicker, an engine error turned into an ``unknown`` verdict so that
delivery goes on.  One class does it for all three.  It is thread-confined: only the thread
that delivers snapshots calls :meth:`VerdictWindow.update`, so the stateful
:class:`~diagnosis.stabilizer.VerdictStabilizer` and the window need no locks.
"""

from __future__ import annotations

from collections import deque

from collectors.snapshot import Snapshot
from diagnosis.model import Finding, Verdict
from diagnosis.stabilizer import VerdictStabilizer

WINDOW_S = 30.0
# At the fastest interval (0.25 s) 30 s would be 120 snapshots; 40 still span 10 s, the
# engine's full-confidence window, at a third of the cost.
MAX_SNAPSHOTS = 40


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

    def update(self, snapshot: Snapshot) -> Verdict:
        """Add ``snapshot`` to the window and diagnose it; engine errors become the verdict."""
        self._remember(snapshot)
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
        window.append(snapshot)
        while snapshot.monotonic - window[0].monotonic > self._window_s:
            window.popleft()
