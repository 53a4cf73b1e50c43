"""A recording played back through the same ``SnapshotSource`` seam the live sampler uses.

One thread of its own decodes frames and delivers them at the recording's pace times the speed,
so the UI thread never touches the file.  Each sample comes with the verdict that was shown
when it was recorded (the pipeline asks :meth:`ReplaySource.verdict_for` instead of judging
again), so the banner and details are those of that moment, even right after a jump.  After a
jump the samples before the new position are handed over first (``on_history``), so sparklines
and the verdict history read as they did live.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from traintop.collectors.snapshot import Snapshot
from traintop.diagnosis.verdict_history import HISTORY_POINTS, extend, point_from
from traintop.diagnosis.verdict_runner import VerdictUpdate
from traintop.store.reader import Recording

SPEEDS: tuple[int, ...] = (1, 10, 60)
MAX_WAIT_S = 5.0  # a gap in the recording (the recorder was stopped) is skipped over
PRIME = HISTORY_POINTS


@dataclass(frozen=True, slots=True)
class Position:
    """Where playback is: for the timeline."""

    index: int
    count: int
    t: float
    start: float
    end: float
    playing: bool
    speed: int


class ReplaySource:
    """Plays ``recording``; every control method may be called from the UI thread."""

    def __init__(self, recording: Recording, *, playing: bool = True) -> None:
        """Plays from the first sample at once, unless ``playing`` is False (paused there)."""
        self.recording = recording
        self._times = [row.t for row in recording.samples]
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._index, self._target = -1, 0
        self._playing, self._speed = playing, SPEEDS[0]
        self._update: VerdictUpdate | None = None
        self._history: tuple = ()
        self._thread: threading.Thread | None = None
        self.on_history: Callable[[Sequence[Snapshot]], object] | None = None
        self.interval_s = float(recording.meta.get("interval_s", 1.0))

    # -- SnapshotSource -------------------------------------------------------------------
    def start(self, on_snapshot: Callable[[Snapshot], None]) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(on_snapshot,), name="traintop-replay", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(2.0)

    def verdict_for(self, snapshot: Snapshot) -> VerdictUpdate | None:
        """The recorded verdict of the sample being delivered (called on this source's thread)."""
        return self._update

    # -- controls (UI thread) -------------------------------------------------------------
    def position(self) -> Position:
        with self._lock:
            index = max(0, self._index)
            return Position(index, len(self._times), self._times[index], self._times[0],
                            self._times[-1], self._playing, self._speed)  # fmt: skip

    def toggle_play(self) -> None:
        with self._lock:
            at_end = self._index >= len(self._times) - 1
            self._playing = not self._playing
            if self._playing and at_end:
                self._target = 0
        self._wake.set()

    def step(self, count: int) -> None:
        """Move ``count`` samples and pause there (frame stepping)."""
        with self._lock:
            self._playing = False
            self._target = _clamp(self._index + count, len(self._times))
        self._wake.set()

    def jump(self, seconds: float) -> None:
        """Move by ``seconds`` of recorded time, keeping play or pause."""
        self.seek(self.position().t + seconds)

    def seek(self, t: float) -> None:
        """Go to the last sample at or before wall-clock time ``t``."""
        index = bisect.bisect_right(self._times, t) - 1
        with self._lock:
            self._target = _clamp(index, len(self._times))
        self._wake.set()

    def seek_index(self, index: int) -> None:
        with self._lock:
            self._target = _clamp(index, len(self._times))
        self._wake.set()

    def cycle_speed(self) -> int:
        with self._lock:
            self._speed = SPEEDS[(SPEEDS.index(self._speed) + 1) % len(SPEEDS)]
            speed = self._speed
        self._wake.set()
        return speed

    # -- the playback thread --------------------------------------------------------------
    def _run(self, on_snapshot: Callable[[Snapshot], None]) -> None:
        while not self._stopping.is_set():
            target, wait = self._next()
            if target is None:
                if wait is None:
                    self._wake.wait()
                    self._wake.clear()
                continue
            self._deliver(target, on_snapshot)

    def _next(self) -> tuple[int | None, float | None]:
        """The sample to show now, or how long to wait (None: until a control changes)."""
        with self._lock:
            if self._target != self._index:
                return self._target, None
            if not self._playing or self._index >= len(self._times) - 1:
                self._playing = self._playing and self._index < len(self._times) - 1
                return None, None
            gap = (self._times[self._index + 1] - self._times[self._index]) / self._speed
        if self._wake.wait(min(MAX_WAIT_S, max(0.0, gap))):
            self._wake.clear()
            return None, 0.0
        with self._lock:
            if self._target == self._index:
                self._target = min(self._index + 1, len(self._times) - 1)
            return (self._target if self._target != self._index else None), None

    def _deliver(self, index: int, on_snapshot: Callable[[Snapshot], None]) -> None:
        jumped = index != self._index + 1
        if jumped:
            self._prime(index)
        snapshot, verdict = self.recording.sample(index)
        self._update = None
        if verdict is not None:
            self._history = extend(self._history, point_from(snapshot, verdict, None))
            self._update = VerdictUpdate(verdict, self._history)
        with self._lock:
            self._index = index
        on_snapshot(snapshot)

    def _prime(self, index: int) -> None:
        """Rebuild history from the samples before ``index`` and hand them to the app."""
        earlier = [self.recording.sample(i) for i in range(max(0, index - PRIME), index)]
        self._history = ()
        for snapshot, verdict in earlier:
            if verdict is not None:
                self._history = extend(self._history, point_from(snapshot, verdict, None))
        if self.on_history is not None and earlier:
            self.on_history([snapshot for snapshot, _ in earlier])


def _clamp(index: int, count: int) -> int:
    return max(0, min(count - 1, index))
