"""Hysteresis for the verdict banner: a new primary must hold before it replaces the old one.

Per-window verdicts can flip between two close findings on noisy samples (data_cpu on one
tick, data_io on the next).  A banner that flickers is worse than one a few seconds late, so
a challenger must win every window for ``switch_after_s`` before it is shown.  Time comes from
the snapshots' monotonic stamps, so tests and replays are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from collectors.snapshot import Snapshot
from diagnosis.engine import diagnose
from diagnosis.model import Finding, Verdict


class VerdictStabilizer:
    """Feed it the current window on every tick; it returns the verdict to display."""

    def __init__(self, min_window_s: float = 3.0, switch_after_s: float = 3.0) -> None:
        if min_window_s < 0 or switch_after_s < 0:
            raise ValueError("min_window_s and switch_after_s must be >= 0")
        self.min_window_s = min_window_s
        self.switch_after_s = switch_after_s
        self._shown: Finding | None = None
        self._shown_since: float = 0.0
        self._challenger: str | None = None
        self._challenger_since: float = 0.0

    def update(self, window: Sequence[Snapshot], *, job_pid: int | None = None) -> Verdict:
        """Diagnose ``window`` (for ``job_pid``, as :func:`diagnose`) and return the stabilised
        verdict with ``since_s`` filled in."""
        fresh = diagnose(window, job_pid=job_pid, min_window_s=self.min_window_s)
        now = max((s.monotonic for s in window), default=0.0)
        if self._adopts(fresh, now):
            self._show(fresh.primary, self._since_for(fresh, now))
            return replace(fresh, since_s=now - self._shown_since)
        return self._keep(fresh, now)

    def _adopts(self, fresh: Verdict, now: float) -> bool:
        """Take the fresh primary when nothing real is shown, when it is the same bottleneck,
        when data ran out (unknown resets at once), or when a challenger held long enough."""
        new = fresh.primary.bottleneck
        shown = self._shown.bottleneck if self._shown else "unknown"
        if new == shown or "unknown" in (new, shown):
            self._challenger = None
            return True
        if self._challenger != new:
            self._challenger, self._challenger_since = new, now
        return now - self._challenger_since >= self.switch_after_s

    def _since_for(self, fresh: Verdict, now: float) -> float:
        if self._shown is not None and self._shown.bottleneck == fresh.primary.bottleneck:
            return self._shown_since
        return self._challenger_since if self._challenger == fresh.primary.bottleneck else now

    def _show(self, finding: Finding, since: float) -> None:
        self._shown, self._shown_since = finding, since
        self._challenger = None

    def _keep(self, fresh: Verdict, now: float) -> Verdict:
        """Keep the shown bottleneck as primary, with this window's evidence when it still
        holds; the fresh winner is listed in ``also`` while it waits its turn."""
        assert self._shown is not None
        shown_id = self._shown.bottleneck
        current = next((f for f in fresh.also if f.bottleneck == shown_id), self._shown)
        self._shown = current
        others = (fresh.primary, *(f for f in fresh.also if f.bottleneck != shown_id))
        return replace(fresh, primary=current, also=others, since_s=now - self._shown_since)
