"""What the pipeline needs from whatever produces snapshots: the sampler, a replay, a script.

The pipeline (and through it the app) depends on this Protocol, never on
``traintop.collectors.sampler`` directly, so tests and the screenshot script drive the very same
pipeline and app with scripted snapshots, and a replay with recorded ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from traintop.collectors.snapshot import Snapshot

if TYPE_CHECKING:
    from traintop.diagnosis.verdict_runner import VerdictUpdate


class SnapshotSource(Protocol):
    """A producer that calls ``on_snapshot`` from its own thread once per interval."""

    def start(self, on_snapshot: Callable[[Snapshot], None]) -> None:
        """Begin sampling; ``on_snapshot`` may be called from any thread."""
        ...

    def stop(self) -> None:
        """Stop sampling and join the thread; called once when the surface is done."""
        ...

    @property
    def interval_s(self) -> float: ...

    @interval_s.setter
    def interval_s(self, value: float) -> None: ...


@runtime_checkable
class RecordedSource(Protocol):
    """A source that carries the verdict each snapshot had (a replay): the pipeline hands on
    that one instead of judging again, so the banner is the one of that moment."""

    def verdict_for(self, snapshot: Snapshot) -> VerdictUpdate | None:
        """The recorded verdict of ``snapshot``, asked on the thread that delivers it."""
        ...
