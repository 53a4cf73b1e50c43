"""What the app needs from whatever produces snapshots: the sampler, a replay, or a test script.

The app depends on this Protocol, never on ``traintop.collectors.sampler`` directly, so tests and
the screenshot script drive the very same app with scripted snapshots.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from traintop.collectors.snapshot import Snapshot

if TYPE_CHECKING:
    from traintop.diagnosis.verdict_runner import VerdictUpdate

INTERVAL_STEPS_S: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0)


class SnapshotSource(Protocol):
    """A producer that calls ``on_snapshot`` from its own thread once per interval."""

    def start(self, on_snapshot: Callable[[Snapshot], None]) -> None:
        """Begin sampling; ``on_snapshot`` may be called from any thread."""
        ...

    def stop(self) -> None:
        """Stop sampling and join the thread; called once when the app exits."""
        ...

    @property
    def interval_s(self) -> float: ...

    @interval_s.setter
    def interval_s(self, value: float) -> None: ...


@runtime_checkable
class RecordedSource(Protocol):
    """A source that carries the verdict each snapshot had (a replay): the app shows that one
    instead of judging again, so the banner is the one of that moment."""

    def verdict_for(self, snapshot: Snapshot) -> VerdictUpdate | None:
        """The recorded verdict of ``snapshot``, asked on the thread that delivers it."""
        ...


def next_interval(current: float, step: int) -> float:
    """The neighbouring preset interval (``step`` = +1 slower, -1 faster), clamped at the ends.

    Works from any current value, so a custom ``--interval 3`` still moves to 2 or 5.
    """
    if step > 0:
        larger = [s for s in INTERVAL_STEPS_S if s > current]
        return larger[0] if larger else INTERVAL_STEPS_S[-1]
    smaller = [s for s in INTERVAL_STEPS_S if s < current]
    return smaller[-1] if smaller else INTERVAL_STEPS_S[0]
