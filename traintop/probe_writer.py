"""What the probe needs from its writer, and where its live-phase stores go.

Split from ``traintop.probe`` for size.  The probe publishes "phase X since T" at every phase
boundary as one word, ``T & ~0xF | X`` (docs/ring-format.md), stored through ``sink[0] = word``:
into the ring segment's mapped live word when the writer offers one (one store, no call), else
through the writer's ``set_live`` (test doubles, the silent writer of DataLoader workers).
The hot paths compute it as ``(T | 15) - (15 - X)``: the same word with one operation on the
(multi-digit) time fewer, ~10 ns a boundary.
"""

from __future__ import annotations

from collections.abc import Callable, MutableSequence, Sequence
from typing import Protocol

LIVE_PHASE_BITS = 0xF  # the live word's low bits hold the phase (traintop.ring_format)


class Writer(Protocol):
    """The part of ``traintop.ring.RingWriter`` the probe uses.

    A writer may also offer ``live_word``, a one-item ``cast('l')`` view of its live word (None
    once released; signed: a store below 2**63 costs a third less than through ``'Q'``, same
    bytes); ``set_live`` then goes unused.
    """

    def record(self, step: int, t_start_ns: int, phase_ns: Sequence[int], samples: int,
               gpu_ns: int = 0, gpu_lag: int = 0, mem_bytes: int = 0, flags: int = 0,
               tokens: int = 0) -> None: ...  # fmt: skip

    def set_live(self, phase_index: int, start_ns: int, /) -> None: ...

    def close(self) -> None: ...


WriterFactory = Callable[[Sequence[str]], Writer]


class StepExtras(Protocol):
    """GPU time and memory attached to a record (see ``traintop.cuda_timing``)."""

    def at_step(self, step: int, now_ns: int) -> tuple[int, int, int, int]: ...


class LiveCalls:
    """Live-word sink for writers without a mapped ``live_word``: decodes and calls set_live.

    ``set_live`` thus sees the start at the live word's 16 ns resolution, as readers do.
    """

    __slots__ = ("_set_live",)

    def __init__(self, set_live: Callable[[int, int], None]) -> None:
        self._set_live = set_live

    def __setitem__(self, _index: int, word: int) -> None:
        self._set_live(word & LIVE_PHASE_BITS, word & ~LIVE_PHASE_BITS)


LiveSink = MutableSequence[int] | LiveCalls
NO_LIVE: LiveSink = [0]  # where live words go while there is no segment (and after close)


def live_sink(writer: Writer) -> LiveSink:
    """The writer's mapped live word if it has one, else its ``set_live`` behind a decoder."""
    word = getattr(writer, "live_word", None)
    return LiveCalls(writer.set_live) if word is None else word
