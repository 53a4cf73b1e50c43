"""What the DataLoader wrapper and the phase contexts touch of the probe, as a type.

Both inline the probe's bookkeeping where a boundary happens (a Python call costs as much as
the work: ``traintop.probe``'s docstring), so they read and write its timing state directly.
This Protocol names that state, so they can be typed without importing the probe, which imports
them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from traintop.probe_writer import LiveSink


class ProbeState(Protocol):
    """The probe's per-step timing state and the calls its inlined boundaries make."""

    _clock: Callable[[], int]
    _on: bool
    _acc: list[int]  # nanoseconds per phase slot in the step so far
    _open: int  # the slot of the phase running now, NO_PHASE before the step's first boundary
    _open_t: int  # when it began
    _t_start: int  # when the step began
    _stack: list[int]  # the phases ``with`` blocks interrupted, innermost last
    _live: LiveSink  # [0] = the segment's live word
    _samples: int  # samples counted by the loader this step

    def _fail(self, exc: BaseException) -> None: ...

    def _wait_begin(self) -> int: ...

    def _wait_end(self, resumed: int, samples: int) -> None: ...
