"""``with probe.phase(name):`` objects: the part of the probe that runs at every phase mark.

They are created once per phase name and reused, because allocating a context manager (or
running a generator-based ``contextmanager``) on every phase would cost more than the timing
itself.  They reach into the probe's accumulators directly: this module and ``traintop.probe``
are one unit split for size, not an API boundary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traintop.probe import Probe

NO_PHASE = -1
OTHER = 4  # the slot of time spent in no named phase (traintop.probe.STANDARD_PHASES)


class PhaseContext:
    """``with probe.phase(name):`` — one cached instance per name keeps entry cheap.

    Same accounting as ``Probe.mark``/``_wait_end``, inlined (this runs several times per
    step); the exit takes explicit arguments: ``*args`` would build a tuple on every phase.
    """

    __slots__ = ("_clock", "_index", "_probe")

    def __init__(self, probe: Probe, index: int) -> None:
        self._probe = probe
        self._index = index
        self._clock = probe._clock

    def __enter__(self) -> PhaseContext:
        probe = self._probe
        if probe._on:
            try:
                now = self._clock()
                index = probe._open
                if index >= 0:
                    probe._acc[index] += now - probe._open_t
                elif not probe._t_start:
                    probe._t_start = now
                probe._stack.append(index)
                probe._open = self._index
                probe._open_t = now
                probe._set_live(self._index, now)
            except Exception as exc:
                probe._fail(exc)
        return self

    def __exit__(self, _type: object, _value: object, _tb: object) -> bool:
        probe = self._probe
        if probe._on:
            try:
                now = self._clock()
                index = probe._open
                if index >= 0:
                    probe._acc[index] += now - probe._open_t
                index = probe._open = probe._stack.pop() if probe._stack else NO_PHASE
                probe._open_t = now
                probe._set_live(index if index >= 0 else OTHER, now)
            except Exception as exc:
                probe._fail(exc)
        return False


class NullContext:
    """What ``phase()`` returns once the probe is off."""

    __slots__ = ()

    def __enter__(self) -> NullContext:
        return self

    def __exit__(self, _type: object, _value: object, _tb: object) -> bool:
        return False


NULL_CONTEXT = NullContext()
