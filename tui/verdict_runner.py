"""Verdicts off the UI thread: one small thread diagnoses a bounded window per tick.

``diagnose()`` costs milliseconds on a big box (8 GPUs, 500 processes); run on the UI thread
every tick it would eat the monitor's CPU budget and delay keys.  The UI thread only appends
the snapshot to a time-bounded deque and hands a tuple of it to the verdict thread; when the
previous run is still going the tick is skipped (the next one carries a newer window anyway),
so there is never more than one run in flight and never more than one per tick.  The stateful
:class:`~diagnosis.api.VerdictStabilizer` is touched by the verdict thread alone.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from textual.message import Message

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


class VerdictReady(Message):
    """Posted from the verdict thread; a newer one replaces it if the UI has not caught up."""

    def __init__(self, update: VerdictUpdate) -> None:
        super().__init__()
        self.update = update

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, VerdictReady)


def failed_verdict(error: Exception, window_s: float) -> Verdict:
    """What the banner shows if the engine raises: a bug must not kill the verdict thread."""
    text = f"diagnosis failed: {type(error).__name__}: {error}"
    return Verdict(Finding("unknown", 0.0, "info", text), (), "system", window_s, None)


class VerdictRunner:
    """Owns the window, the stabilizer and the thread; ``deliver`` is called on that thread."""

    def __init__(
        self,
        deliver: Callable[[VerdictUpdate], None],
        *,
        job_pid: int | None = None,
        window_s: float = WINDOW_S,
        stabilizer: VerdictStabilizer | None = None,
    ) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self._deliver = deliver
        self._job_pid = job_pid
        self._window_s = window_s
        self._stabilizer = stabilizer or VerdictStabilizer()
        self._window: deque[Snapshot] = deque(maxlen=MAX_SNAPSHOTS)
        self._history: tuple[VerdictPoint, ...] = ()
        self._inbox: queue.SimpleQueue[tuple[Snapshot, ...] | None] = queue.SimpleQueue()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self.runs = 0
        self.skipped = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="traintop-verdict", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        if self._thread is not None:
            self._inbox.put(None)
            self._thread.join(timeout_s)
            self._thread = None

    def offer(self, snapshot: Snapshot) -> bool:
        """Add ``snapshot`` to the window (UI thread); start a run unless one is in flight."""
        self._remember(snapshot)
        if self._thread is None or not self._idle.is_set():
            self.skipped += 1
            return False
        self._idle.clear()
        self._inbox.put(tuple(self._window))
        return True

    def wait_idle(self, timeout_s: float = 5.0) -> bool:
        """Block until the run in flight has delivered (tests and benchmarks use it)."""
        return self._idle.wait(timeout_s)

    def _remember(self, snapshot: Snapshot) -> None:
        """Keep the last ``window_s`` seconds (at most ``MAX_SNAPSHOTS``); a clock that went
        back starts a new window."""
        window = self._window
        if window and snapshot.monotonic < window[-1].monotonic:
            window.clear()
        window.append(snapshot)
        while snapshot.monotonic - window[0].monotonic > self._window_s:
            window.popleft()

    def _loop(self) -> None:
        while (window := self._inbox.get()) is not None:
            try:
                self._deliver(self._run(window))
            finally:
                self._idle.set()

    def _run(self, window: tuple[Snapshot, ...]) -> VerdictUpdate:
        """Diagnose one window on the verdict thread; history stays private to this thread."""
        self.runs += 1
        try:
            verdict = self._stabilizer.update(window, job_pid=self._job_pid)
        except Exception as error:  # shown in the banner; the thread lives on
            verdict = failed_verdict(error, window[-1].monotonic - window[0].monotonic)
        self._history = extend(self._history, point_from(window[-1], verdict, self._job_pid))
        return VerdictUpdate(verdict, self._history)
