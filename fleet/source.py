"""The fleet's snapshot source: polls Prometheus on its own thread, beside the live sampler.

It has the shape of :class:`traintop.pipeline.source.SnapshotSource`
(``start``/``stop``/``interval_s``) but delivers :class:`FleetSnapshot`; HTTP never runs on the UI
thread.  A failed refresh keeps the last good data and carries the one-line error, so the screen
says what is wrong instead of going blank.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

from traintop.fleet.build import QUERIES, Answers, build_fleet
from traintop.fleet.model import FleetSnapshot
from traintop.fleet.query import PrometheusClient, QueryError

MIN_INTERVAL_S = 1.0
MAX_INTERVAL_S = 300.0


class FleetSource:
    """Queries Prometheus every ``interval_s`` on one daemon thread."""

    def __init__(
        self,
        client: PrometheusClient,
        *,
        wanted: str | None = None,
        stale_after_s: float = 60.0,
        interval_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.wanted = wanted
        self.stale_after_s = stale_after_s
        self._interval_s = min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, interval_s))
        self._clock = clock
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: FleetSnapshot | None = None

    @property
    def interval_s(self) -> float:
        return self._interval_s

    @interval_s.setter
    def interval_s(self, value: float) -> None:
        self._interval_s = min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, value))
        self._wake.set()

    def select(self, wanted: str | None) -> None:
        """Show another job from the next refresh on, which comes at once."""
        self.wanted = wanted
        self._wake.set()

    def fetch(self) -> FleetSnapshot:
        """One refresh: the four queries, then the pure build; errors become ``error``."""
        now = self._clock()
        try:
            answers = Answers(
                **{k: self.client.query(q, at=now) for k, q in QUERIES.items()}, now=now
            )
        except QueryError as exc:
            return self._failed(str(exc), now)
        self._last = build_fleet(
            answers,
            wanted=self.wanted,
            stale_after_s=self.stale_after_s,
            source=self.client.base_url,
            previous=self._last,
        )
        return self._last

    def _failed(self, message: str, now: float) -> FleetSnapshot:
        if self._last is None:
            return FleetSnapshot(now, self.client.base_url, error=message)
        return replace(self._last, error=message)

    def start(self, on_snapshot: Callable[[FleetSnapshot], object]) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._run, args=(on_snapshot,), name="traintop-fleet", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self.client.timeout_s + 1.0)
            self._thread = None

    def _run(self, on_snapshot: Callable[[FleetSnapshot], object]) -> None:
        """Refresh every interval; a refresh taken before start counts as the first."""
        if self._last is not None:
            self._wake.wait(self._interval_s)
        while not self._stopping.is_set():
            self._wake.clear()
            on_snapshot(self.fetch())
            self._wake.wait(self._interval_s)
