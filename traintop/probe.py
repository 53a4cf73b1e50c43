"""The in-process probe: turns phase marks and batch waits into one ring record per step.

Everything here runs inside the user's training loop, so two rules shape the code:

* Cost.  A step with five phase marks must stay under two microseconds: phase context managers
  are cached objects (no generator-based ``contextmanager``), each boundary's bookkeeping is
  inlined where it happens (a Python call costs as much as the work), durations accumulate in a
  plain list, time in no phase goes straight to "other" (so the slots partition the step with
  no gap to compute), the live phase is published by one store into the segment's live word,
  and the ring segment is created at start-up (`traintop run`) or lazily at the first step.
* Harmlessness.  No exception ever leaves the probe.  The first failure prints one line to
  stderr and turns the probe off; the training code keeps running and computes the same values.

Phase slots are fixed by the first record (the ring header stores their names): the five
standard ones, then up to three custom names seen before the first ``step()`` or declared with
``attach(phases=...)`` (a segment made at start-up has its header rewritten for them).  Later
unknown names are counted as "other".
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from traintop.ledger import Ledger
from traintop.loader import TimedLoader
from traintop.patches import Patches
from traintop.phase_context import NO_PHASE, NULL_CONTEXT, NullContext, PhaseContext
from traintop.probe_writer import NO_LIVE, LiveSink, StepExtras, Writer, WriterFactory, live_sink

STANDARD_PHASES = ("data", "forward", "backward", "optimizer", "other")
DATA, FORWARD, BACKWARD, OPTIMIZER, OTHER = range(5)
MAX_PHASES = 8
NO_TICK = 1 << 62  # ``Probe._tick_at`` while no boundary is asked for


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
        self._names: list[str] = list(STANDARD_PHASES)
        self._slots = {phase: i for i, phase in enumerate(self._names)}
        self._contexts: dict[str, PhaseContext] = {}
        self._marks: dict[str, int] = {}  # mark() names -> slots, cleared when the probe is off
        self._acc = [0] * len(STANDARD_PHASES)  # one slot per phase name, passed as is
        self._zeros = [0] * len(STANDARD_PHASES)  # copied to reset ``_acc`` after each record
        self._open = NO_PHASE
        self._open_t = 0
        self._stack: list[int] = []
        self._t_start = 0
        self._samples = 0
        self._step = 0
        self._writer: Writer | None = None
        self._live: LiveSink = NO_LIVE  # [0] = the live word
        self._on = True
        self._auto = False  # set by the zero-code hooks; explicit API calls clear it
        self._ledger = Ledger()  # the collectives this process enters (traintop.comm_hooks)
        self._patches = Patches()  # what the zero-code hooks changed in torch, to switch off
        self._thread = threading.get_ident()  # the training loop's thread: the one that made us
        # Called with the writer once the segment exists (``traintop.attach`` starts the stack
        # helper there); its failures are its own.
        self._on_segment: Callable[[Writer], None] | None = None
        # A boundary the helper thread asked for (``traintop.facts_agent``): at the end of a step
        # numbered ``_tick_at`` or later, ``_on_tick(step, now)`` runs; one comparison a step.
        self._tick_at = NO_TICK
        self._on_tick: Callable[[int, int], None] = _no_tick
        self._facts: Any = None  # the facts agent, woken by the helper thread
        for phase in phases:
            self._slot(phase)

    @property
    def enabled(self) -> bool:
        """False after a failure (or in a forked child): the probe then does nothing."""
        return self._on

    @property
    def phase_names(self) -> tuple[str, ...]:
        return tuple(self._names)

    def phase(self, name: str) -> PhaseContext | NullContext:
        """Context manager timing one phase; nested phases pause the outer one."""
        self._auto = False
        context = self._contexts.get(name)
        if context is not None:
            return context
        if not self._on:
            return NULL_CONTEXT
        try:
            context = self._contexts[name] = PhaseContext(self, self._slot(str(name)))
        except Exception as exc:
            self._fail(exc)
            return NULL_CONTEXT
        return context

    def mark(self, name: str) -> None:
        """Phase boundary: ``name`` starts now, and the time since the previous mark (or since
        the batch arrived) goes to the phase that mark started; ``step()`` closes the last one.

        The cheapest way to time phases (one clock read per boundary, against two per ``with``
        block).  Inside a ``with probe.phase()`` block it replaces that block's phase until exit.
        """
        self._auto = False
        try:
            try:
                index = self._marks[name]
            except KeyError:
                index = self._mark_slot(name)
                if index is None:
                    return
            now = self._clock()
            open_ = self._open
            if open_ >= 0:
                self._acc[open_] += now - self._open_t
            else:
                self._t_start = now
            self._open = index
            self._open_t = now
            self._live[0] = (now | 15) - (15 - index)
        except Exception as exc:
            self._fail(exc)

    def loader(self, loader: Iterable[Any]) -> Iterable[Any]:
        """Wrap a DataLoader (or any iterable) to time each wait for the next batch."""
        self._auto = False
        return TimedLoader(self, loader)

    def step(self, samples: int | None = None, tokens: int = 0) -> None:
        """Close the current step and write its record (samples default to the loader's count).

        The slots already partition the step (time in no phase went to OTHER as it passed), so
        the record is the accumulators as they are; fresh ones start the next step.
        """
        self._auto = False
        self._record(samples, tokens)

    def _record(self, samples: int | None = None, tokens: int = 0) -> None:
        """``step()`` for the zero-code hooks, which stay on (``traintop.step_boundary``)."""
        if not self._on:
            return
        try:
            now = self._clock()
            acc = self._acc
            open_ = self._open
            if open_ >= 0:
                acc[open_] += now - self._open_t
            start = self._t_start or now
            step = self._step
            writer = self._writer
            if writer is None:  # creating the segment takes ms: keep it out of the next step
                writer = self._create_writer()
                now = self._clock()
            count = self._samples if samples is None else samples
            if self._extras is None:
                writer.record(step, start, acc, count, 0, 0, 0, 0, tokens)
                if self._extras_factory is not None and not step & 63:
                    self._extras = self._extras_factory()
            else:
                gpu_ns, gpu_lag, mem, flags = self._extras.at_step(step, now)
                writer.record(step, start, acc, count, gpu_ns, gpu_lag, mem, flags, tokens)
            self._acc = self._zeros.copy()  # the writer has copied acc: a fresh list is cheapest
            self._t_start = self._open_t = now
            if self._stack:  # a ``with`` block spans the step: its phase goes on in the next one
                self._live[0] = (now | 15) - (15 - open_)
            else:  # the step closes the last mark's phase (readers see that from the record's end)
                self._open = OTHER
            self._samples = 0
            self._step = step + 1
            if step >= self._tick_at:
                self._on_tick(step, now)
        except Exception as exc:
            self._fail(exc)

    def close(self) -> None:
        """Stop recording and release the segment (the ring marks it closed)."""
        writer, self._writer, self._on = self._writer, None, False
        self._marks.clear()
        self._live = NO_LIVE
        self._ledger.forget()
        if writer is not None:
            try:
                writer.close()
            except Exception as exc:
                _warn(f"probe close failed: {exc}")

    # ---- internal API shared with traintop.loader, phase_context and torch_hooks ------------
    #
    # Invariant: ``_open`` is NO_PHASE only before the first boundary (``_t_start`` is 0 then);
    # from there on, time in no phase is accounted to OTHER as it happens.

    def _slot(self, name: str) -> int:
        """Index of a phase name; new names get a slot only until the first record."""
        index = self._slots.get(name)
        if index is not None:
            return index
        if len(self._names) >= MAX_PHASES or not self._layout_open((*self._names, name)):
            return OTHER
        self._names.append(name)
        self._acc.append(0)
        self._zeros.append(0)
        self._slots[name] = len(self._names) - 1
        return len(self._names) - 1

    def _layout_open(self, names: tuple[str, ...]) -> bool:
        """Whether phase ``names`` can still be the segment's: no segment yet, or one made at
        start-up (``traintop.run_start``) that holds no record, whose header takes them now."""
        writer = self._writer
        if writer is None:
            return True
        relayout = getattr(writer, "rewrite_layout", None)
        return not self._step and relayout is not None and relayout(self.name, names)

    def _mark_slot(self, name: str) -> int | None:
        """Slot of a name not yet seen by ``mark`` (None once the probe is off), then cached."""
        if not self._on:
            return None
        index = self._marks[name] = self._slot(str(name))
        return index

    def _switch(self, index: int) -> None:
        """Close whatever is open and open ``index`` (NO_PHASE: none, i.e. "other"); for hooks."""
        if not self._on:
            return
        try:
            now = self._clock()
            open_ = self._open
            if open_ >= 0:
                self._acc[open_] += now - self._open_t
            else:
                self._t_start = now
            index = self._open = index if index >= 0 else OTHER
            self._open_t = now
            self._live[0] = (now | 15) - (15 - index)
        except Exception as exc:
            self._fail(exc)

    def _wait_begin(self) -> int:
        """The loop asks for the next batch: open the data phase; returns the phase it pauses.

        The caller hands that back to ``_wait_end`` (a local beats a stack on this hot path).
        """
        open_ = self._open
        if self._on:
            try:
                now = self._clock()
                if open_ >= 0:
                    self._acc[open_] += now - self._open_t
                else:
                    self._t_start = now
                    open_ = OTHER
                self._open = DATA
                self._open_t = now
                self._live[0] = (now | 15) - (15 - DATA)
            except Exception as exc:
                self._fail(exc)
        return open_

    def _wait_end(self, resumed: int, samples: int) -> None:
        """The batch arrived: close the data phase, count its samples, resume ``resumed``."""
        if not self._on:
            return
        try:
            now = self._clock()
            self._acc[self._open] += now - self._open_t
            self._open = resumed
            self._open_t = now
            self._live[0] = (now | 15) - (15 - resumed)
            self._samples += samples
        except Exception as exc:
            self._fail(exc)

    def _cut(self) -> tuple[int, list[int], int] | None:
        """End the step's accounting now without writing it: (start ns, phase ns, samples).

        For a boundary that may be taken back (``traintop.step_boundary``): ``_paste`` merges
        the cut into the step going on, ``_write_cut`` writes it as the step it was.
        """
        if not self._on:
            return None
        try:
            now = self._clock()
            acc, open_ = self._acc, self._open
            if open_ >= 0:
                acc[open_] += now - self._open_t
            cut = (self._t_start or now, acc, self._samples)
        except Exception as exc:
            self._fail(exc)
            return None
        self._acc, self._samples = self._zeros.copy(), 0
        self._t_start = self._open_t = now
        if not self._stack:
            self._open = OTHER
        return cut

    def _paste(self, cut: tuple[int, list[int], int]) -> None:
        """Take a cut back: its time and samples belong to the step going on."""
        start, acc, samples = cut
        for index, ns in enumerate(acc):  # a slot added since has nothing in the cut
            self._acc[index] += ns
        self._t_start = start
        self._samples += samples

    def _write_cut(self, cut: tuple[int, list[int], int], samples: int) -> None:
        """Write a cut as the next step's record (its own start, phases; ``samples``)."""
        if not self._on:
            return
        try:
            writer = self._writer or self._create_writer()
            writer.record(self._step, cut[0], cut[1], samples, 0, 0, 0, 0, 0)
            self._step += 1
        except Exception as exc:
            self._fail(exc)

    def _create_writer(self) -> Writer:
        writer = self._writer = self._writer_factory(tuple(self._names))
        self._live = live_sink(writer)
        views = getattr(writer, "ledger_views", None)
        found = views() if views is not None else None
        if found is not None:
            self._ledger.adopt(*found)
        if self._on_segment is not None:
            self._on_segment(writer)
        return writer

    def _restart(self) -> None:
        """Drop the step in progress: the next landmark starts a new one (hooks switched on
        again, ``traintop.torch_hooks.Hooks``)."""
        self._acc = self._zeros.copy()
        self._open, self._open_t, self._t_start, self._samples = NO_PHASE, 0, 0, 0
        self._stack.clear()

    def _fail(self, exc: BaseException) -> None:
        """Turn the probe off after its first failure, with one line on stderr.

        A segment released under the probe (closed at exit, or inherited by a forked child)
        makes the live store fail too: that is no error, the probe just goes quiet.
        """
        if not self._on:
            return
        if not getattr(self._writer, "enabled", True):
            self._forget_in_child()
            return
        _warn(f"probe disabled after an internal error ({type(exc).__name__}: {exc})")
        self.close()

    def _forget_in_child(self) -> None:
        """Go quiet: a forked child must neither write nor close the parent's segment (nor may
        anyone write once the segment was released)."""
        self._on = False
        self._writer = None
        self._marks.clear()
        self._live = NO_LIVE
        self._ledger.forget()


def _no_tick(_step: int, _now: int) -> None:
    """``Probe._on_tick`` until the facts agent sets its own."""


def _warn(message: str) -> None:
    with contextlib.suppress(Exception):
        print(f"traintop: {message}", file=sys.stderr)
