"""The in-process probe: turns phase marks and batch waits into one ring record per step.

Everything here runs inside the user's training loop, so two rules shape the code:

* Cost.  A step with five phase marks must stay around a microsecond or two: phase context
  managers are cached objects (no generator-based ``contextmanager``), durations accumulate in a
  plain list, and the ring segment is created lazily at the first step boundary.
* Harmlessness.  No exception ever leaves the probe.  The first failure prints one line to
  stderr and turns the probe off; the training code keeps running and computes the same values.

Phase slots are fixed when the segment is created (the ring header stores their names): the five
standard ones, then up to three custom names seen before the first ``step()`` or declared with
``attach(phases=...)``.  Later unknown names are counted as "other".
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from traintop.loader import TimedLoader, infer_batch_size

STANDARD_PHASES = ("data", "forward", "backward", "optimizer", "other")
DATA, FORWARD, BACKWARD, OPTIMIZER, OTHER = range(5)
MAX_PHASES = 8
NO_PHASE = -1


class Writer(Protocol):
    """The part of ``traintop.ring.RingWriter`` the probe uses."""

    def record(self, step: int, t_start_ns: int, phase_ns: Sequence[int], samples: int,
               gpu_ns: int = 0, gpu_lag: int = 0, mem_bytes: int = 0, flags: int = 0,
               tokens: int = 0) -> None: ...  # fmt: skip

    def set_live(self, phase_index: int, start_ns: int, step: int) -> None: ...

    def close(self) -> None: ...


WriterFactory = Callable[[Sequence[str]], Writer]


class StepExtras(Protocol):
    """GPU time and memory attached to a record (see ``traintop.cuda_timing``)."""

    def at_step(self, step: int, now_ns: int) -> tuple[int, int, int, int]: ...


class _PhaseContext:
    """``with probe.phase(name):`` — one cached instance per name keeps entry cheap."""

    __slots__ = ("_index", "_probe")

    def __init__(self, probe: Probe, index: int) -> None:
        self._probe = probe
        self._index = index

    def __enter__(self) -> _PhaseContext:
        probe = self._probe  # Probe._push inlined: this runs several times per step
        if probe._on:
            try:
                now = probe._clock()
                if probe._open >= 0:
                    probe._acc[probe._open] += now - probe._open_t
                elif not probe._t_start:
                    probe._t_start = now
                probe._stack.append(probe._open)
                probe._open = self._index
                probe._open_t = now
                if probe._writer is not None:
                    probe._writer.set_live(self._index, now, probe._step)
            except Exception as exc:
                probe._fail(exc)
        return self

    def __exit__(self, *_exc: object) -> bool:
        probe = self._probe  # Probe._pop inlined
        if probe._on:
            try:
                now = probe._clock()
                if probe._open >= 0:
                    probe._acc[probe._open] += now - probe._open_t
                probe._open = probe._stack.pop() if probe._stack else NO_PHASE
                probe._open_t = now
            except Exception as exc:
                probe._fail(exc)
        return False


class _NullContext:
    """What ``phase()`` returns once the probe is off."""

    __slots__ = ()

    def __enter__(self) -> _NullContext:
        return self

    def __exit__(self, *_exc: object) -> bool:
        return False


_NULL_CONTEXT = _NullContext()


class Probe:
    """Per-process step timer feeding one ring segment.  Not thread-safe: use one thread."""

    def __init__(
        self,
        name: str,
        *,
        writer_factory: WriterFactory,
        phases: Iterable[str] = (),
        clock: Callable[[], int] = time.monotonic_ns,
        extras_factory: Callable[[], StepExtras | None] | None = None,
    ) -> None:
        self.name = name
        self._writer_factory = writer_factory
        self._extras_factory = extras_factory
        self._extras: StepExtras | None = None
        self._clock = clock
        self._names = list(STANDARD_PHASES)
        self._slots = {phase: i for i, phase in enumerate(self._names)}
        self._contexts: dict[str, _PhaseContext] = {}
        self._acc = [0] * MAX_PHASES
        self._open = NO_PHASE
        self._open_t = 0
        self._stack: list[int] = []
        self._t_start = 0
        self._samples = 0
        self._step = 0
        self._writer: Writer | None = None
        self._on = True
        self._auto = False  # set by the zero-code hooks; explicit API calls clear it
        for phase in phases:
            self._slot(phase)

    @property
    def enabled(self) -> bool:
        """False after a failure (or in a forked child): the probe then does nothing."""
        return self._on

    @property
    def phase_names(self) -> tuple[str, ...]:
        return tuple(self._names)

    def phase(self, name: str) -> _PhaseContext | _NullContext:
        """Context manager timing one phase; nested phases pause the outer one."""
        self._auto = False
        context = self._contexts.get(name)
        if context is not None:
            return context
        if not self._on:
            return _NULL_CONTEXT
        try:
            context = self._contexts[name] = _PhaseContext(self, self._slot(str(name)))
        except Exception as exc:
            self._fail(exc)
            return _NULL_CONTEXT
        return context

    def loader(self, loader: Iterable[Any]) -> Iterable[Any]:
        """Wrap a DataLoader (or any iterable) to time each wait for the next batch."""
        self._auto = False
        return TimedLoader(self, loader)

    def step(self, samples: int | None = None, tokens: int = 0) -> None:
        """Close the current step and write its record (samples default to the loader's count)."""
        self._auto = False
        self._end_step(samples, tokens)

    def close(self) -> None:
        """Stop recording and release the segment (the ring marks it closed)."""
        writer, self._writer, self._on = self._writer, None, False
        if writer is not None:
            try:
                writer.close()
            except Exception as exc:
                _warn(f"probe close failed: {exc}")

    # ---- internal API shared with traintop.loader and traintop.torch_hooks -----------------

    def _slot(self, name: str) -> int:
        """Index of a phase name; new names get a slot only until the segment exists."""
        index = self._slots.get(name)
        if index is not None:
            return index
        if self._writer is not None or len(self._names) >= MAX_PHASES:
            return OTHER
        self._names.append(name)
        self._slots[name] = len(self._names) - 1
        return len(self._names) - 1

    def _push(self, index: int, now: int) -> None:
        """Open phase ``index``, pausing the one already open."""
        if self._open >= 0:
            self._acc[self._open] += now - self._open_t
        elif not self._t_start:
            self._t_start = now
        self._stack.append(self._open)
        self._open, self._open_t = index, now
        if self._writer is not None:
            self._writer.set_live(index, now, self._step)

    def _pop(self, now: int) -> None:
        """Close the open phase and resume the one it paused."""
        if self._open >= 0:
            self._acc[self._open] += now - self._open_t
        self._open = self._stack.pop() if self._stack else NO_PHASE
        self._open_t = now

    def _switch(self, index: int) -> None:
        """Close whatever is open and open ``index`` (NO_PHASE: nothing); used by the hooks."""
        if not self._on:
            return
        try:
            now = self._clock()
            if self._open >= 0:
                self._acc[self._open] += now - self._open_t
            elif not self._t_start:
                self._t_start = now
            self._open, self._open_t = index, now
        except Exception as exc:
            self._fail(exc)

    def _wait_begin(self) -> None:
        """The training loop asks for the next batch."""
        if self._on:
            try:
                self._push(DATA, self._clock())
            except Exception as exc:
                self._fail(exc)

    def _wait_end(self, batch: Any, fallback_size: int | None) -> None:
        """The batch arrived: close the data phase and count its samples."""
        if not self._on:
            return
        try:
            self._pop(self._clock())
            size = infer_batch_size(batch)
            self._samples += size if size is not None else (fallback_size or 0)
        except Exception as exc:
            self._fail(exc)

    def _end_step(self, samples: int | None, tokens: int) -> None:
        if not self._on:
            return
        try:
            self._write(self._clock(), samples, tokens)
        except Exception as exc:
            self._fail(exc)

    def _write(self, now: int, samples: int | None, tokens: int) -> None:
        start = self._t_start or now
        phases = self._phase_durations(now, start)
        writer = self._writer
        if writer is None:  # creating the segment takes ms: keep it out of the next step
            writer = self._create_writer()
            now = self._clock()
        gpu_ns = gpu_lag = mem = flags = 0
        if self._extras is not None:
            gpu_ns, gpu_lag, mem, flags = self._extras.at_step(self._step, now)
        elif self._extras_factory is not None and not self._step & 63:
            self._extras = self._extras_factory()
        count = self._samples if samples is None else samples
        writer.record(self._step, start, phases, count, gpu_ns, gpu_lag, mem, flags, tokens)
        self._acc = [0] * MAX_PHASES
        self._t_start = self._open_t = now
        self._samples = 0
        self._step += 1

    def _phase_durations(self, now: int, start: int) -> list[int]:
        """This step's time per slot; time in no phase at all is "other"."""
        acc = self._acc
        if self._open >= 0:
            acc[self._open] += now - self._open_t
        phases = acc[: len(self._names)]
        phases[OTHER] += max(0, now - start - sum(phases))
        return phases

    def _create_writer(self) -> Writer:
        self._writer = self._writer_factory(tuple(self._names))
        return self._writer

    def _fail(self, exc: BaseException) -> None:
        """Turn the probe off after its first failure, with one line on stderr."""
        if not self._on:
            return
        _warn(f"probe disabled after an internal error ({type(exc).__name__}: {exc})")
        self.close()

    def _forget_in_child(self) -> None:
        """After fork: the child must neither write nor close the parent's segment."""
        self._on = False
        self._writer = None


def _warn(message: str) -> None:
    with contextlib.suppress(Exception):
        print(f"traintop: {message}", file=sys.stderr)
