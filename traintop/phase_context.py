"""``with probe.phase(name):`` objects: the part of the probe that runs at every phase mark.

They are created once per phase name and reused, because allocating a context manager (or
running a generator-based ``contextmanager``) on every phase would cost more than the timing
itself.  They reach into the probe's accumulators directly: this module and ``traintop.probe``
are one unit split for size, not an API boundary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from traintop.probe_state import ProbeState

NO_PHASE = -1
DATA, OTHER = 0, 4  # slots of the batch wait and of time in no phase (probe.STANDARD_PHASES)


class PhaseContext:
    """``with probe.phase(name):`` — one cached instance per name keeps entry cheap.

    Same accounting as ``Probe.mark``, inlined (this runs several times per step, and a call
    costs as much as the work); the exit takes explicit arguments: ``*args`` would build a
    tuple on every phase.
    """

    __slots__ = ("_clock", "_index", "_probe")

    def __init__(self, probe: ProbeState, index: int) -> None:
        self._probe = probe
        self._index = index
        self._clock = probe._clock

    def __enter__(self) -> PhaseContext:
        probe = self._probe
        if probe._on:
            try:
                now = self._clock()
                open_ = probe._open
                if open_ >= 0:
                    probe._acc[open_] += now - probe._open_t
                else:  # the first boundary since the probe was made (traintop.probe)
                    probe._t_start = now
                    open_ = OTHER
                probe._stack.append(open_)
                index = probe._open = self._index
                probe._open_t = now
                probe._live[0] = (now | 15) - (15 - index)
            except Exception as exc:
                probe._fail(exc)
        return self

    def __exit__(self, _type: object, _value: object, _tb: object) -> Literal[False]:
        probe = self._probe
        if probe._on:
            try:
                now = self._clock()
                index = probe._open
                if index >= 0:
                    probe._acc[index] += now - probe._open_t
                index = probe._open = probe._stack.pop() if probe._stack else OTHER
                probe._open_t = now
                probe._live[0] = (now | 15) - (15 - index)  # the phase returned to is live again
            except Exception as exc:
                probe._fail(exc)
        return False


class NullContext:
    """What ``phase()`` returns once the probe is off."""

    __slots__ = ()

    def __enter__(self) -> NullContext:
        return self

    def __exit__(self, _type: object, _value: object, _tb: object) -> Literal[False]:
        return False


NULL_CONTEXT = NullContext()
