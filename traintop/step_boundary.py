"""Where the zero-code hooks end a step: one step per iteration of the training loop.

A loop iteration is whatever updates the weights once, and the hooks see only its landmarks
(batch fetches, ``backward()``, optimizer steps, the outermost module call), so the boundary is
derived from which landmarks the loop has:

* Optimizers.  An iteration is the cycle of optimizer steps that repeats: the optimizer that
  stepped first (the *leader*) stepping again starts the next one.  The step closes after the
  optimizer that stepped last before the leader came round again (the *closer*, learned from
  the loop itself, so a GAN's discriminator + generator updates make one step, not two).  Until
  learned, and whenever the pattern changes (a generator updated every fifth iteration), the
  step closes at the leader's next step instead: still one step per iteration.
* No optimizer (hand-written updates).  The step closes at each batch fetch when the loop has
  a DataLoader, else at the model's first call after a ``backward()`` (so the step reads
  forward, backward, update, as the loop does), else, for code with no module at all, at the
  end of each ``backward()``.  Those boundaries are provisional for the first
  ``CONFIRM_S`` seconds: an optimizer step then (a loop accumulating gradients over
  micro-batches reaches its first one) takes them back, merging them into its step, and the
  optimizer rule is the only one from then on.  So gradient accumulation is one step per
  optimizer step from the very first, and a loop without optimizer is listed ``CONFIRM_S``
  after its first step.

Samples come from the DataLoader; a step without any counts the outermost module calls fed to
it (``traintop.module_samples``): the first call of each micro-batch (a call after a
``backward()`` outside an optimizer step starts a new one), never a re-evaluation inside an
optimizer's closure or the generator's pass through the discriminator.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from traintop.probe import FORWARD, NO_PHASE, OPTIMIZER, OTHER, Probe

_BETWEEN_PHASES = (OTHER, NO_PHASE)
CONFIRM_S = 2.0  # how long a loop must go without an optimizer step to be stepped without one
_MAX_CUTS = 1024  # provisional steps kept at most (a fast loop confirms by count first)
MODEL_HOOK_STEPS = 16  # steps in a row the model's hook must add nothing before it goes


class StepBoundary:
    """Turns the landmarks the torch hooks report into ``probe.step()`` calls."""

    def __init__(self, probe: Probe) -> None:
        self._probe = probe
        self._leader: weakref.ref[Any] | None = None  # weak: a dropped optimizer is replaced
        self._closer = 0  # id() of the optimizer whose step ends an iteration
        self._last = 0  # id() of the optimizer that stepped last
        self._pending = False  # an optimizer stepped since the step closed
        self._closed_in_pre = False
        self.optimizers = False  # some optimizer stepped: optimizer steps define the step
        self.loader = False  # the loop fetches batches from a DataLoader
        self._fetched = False  # a batch was fetched since the step closed
        self._backward = False  # a backward() ran since the step closed
        self._model = False  # an outermost module call was seen (traintop.module_samples)
        self._in_optimizer = False
        self._count_next = True  # the next outermost call starts a micro-batch
        self._module_samples = 0
        # The model search ends at the first step; None once it is over
        self.on_close: Callable[[], None] | None = None
        self._cuts: list[tuple[tuple[int, list[int], int], int]] = []  # provisional: cut, rows
        self._confirmed = False  # the loop has no optimizer: fallback boundaries are final
        # Set by traintop.module_samples once the model is hooked: takes the hook out again
        self.drop_model_hook: Callable[[], None] | None = None
        self._model_told = False  # the model's hook opened forward this step
        self._quiet_model_steps = 0

    def optimizer_pre(self, optimizer: Any) -> None:
        """An optimizer is about to update: the leader coming round again ends the iteration."""
        if self._cuts and not self.optimizers:  # they were micro-batches of this update
            self._take_back()
        self.optimizers = self._in_optimizer = True
        leader = self._leader() if self._leader is not None else None
        self._closed_in_pre = False
        if leader is None:
            self._leader, self._closer = weakref.ref(optimizer), id(optimizer)
        elif leader is optimizer and self._pending:  # the closer did not close it: relearn
            self._closer = self._last
            self._closed_in_pre = True
            self.close()
        probe = self._probe
        if probe._on:  # ``Probe._switch(OPTIMIZER)`` inlined: a call is a fifth of its cost
            try:
                now = probe._clock()
                open_ = probe._open
                if open_ >= 0:
                    probe._acc[open_] += now - probe._open_t
                else:
                    probe._t_start = now
                probe._open = OPTIMIZER
                probe._open_t = now
                probe._live[0] = (now | 15) - (15 - OPTIMIZER)
            except Exception as exc:
                probe._fail(exc)

    def optimizer_post(self, optimizer: Any) -> None:
        """The update is done: the step closes here if this optimizer ends the iteration (the
        record closes the optimizer phase; readers see "other" from the record's end)."""
        self._in_optimizer = self._count_next = False
        self._last = id(optimizer)
        self._pending = True
        if self._last == self._closer and not self._closed_in_pre:
            self.close()
        else:
            self._probe._switch(NO_PHASE)

    def batch_wanted(self) -> None:
        """The loop asks its DataLoader for a batch: a boundary only for loops with no optimizer."""
        self.loader = True
        if self._fetched and not self.optimizers:
            self._fallback()
        self._fetched = True

    def backward_done(self) -> None:
        """``backward()`` returned: a new micro-batch may follow, or (no optimizer, no loader)
        the iteration ended."""
        if not self._in_optimizer:
            self._count_next = True
        self._backward = True
        if not (self.optimizers or self.loader or self._model):
            self._fallback()

    def model_called(self, samples: int) -> None:
        """The outermost module was called with ``samples`` rows: forward starts (from "other");
        after a backward() in a loop with neither optimizer nor DataLoader, a new step does."""
        self._model = True
        if self._backward and not (self.optimizers or self.loader):
            self._fallback()
        if self._count_next:
            self._module_samples += samples
            self._count_next = False
        if self._probe._open in _BETWEEN_PHASES:
            self._probe._switch(FORWARD)
            self._model_told = True

    def close(self) -> None:
        """Write the step: loader samples when there were any, else the model's."""
        probe = self._probe
        if self.drop_model_hook is not None:
            self._judge_model_hook()
        probe._record(None if probe._samples or not self._module_samples else self._module_samples)
        # ``_next_step`` inlined: once a step, where a call costs about 400 instructions
        self._pending = self._fetched = self._backward = False
        self._count_next = True
        self._module_samples = 0
        if self.on_close is not None:
            self.on_close()

    def _judge_model_hook(self) -> None:
        """Count the steps in a row where the model's hook told nothing the other landmarks did
        not (the loader counted the samples, forward had begun at the batch, an optimizer ends
        the step); after ``MODEL_HOOK_STEPS`` it goes, and the model's calls take torch's fast
        path again."""
        told, self._model_told = self._model_told, False
        if told or not (self._probe._samples and self.optimizers and self.loader):
            self._quiet_model_steps = 0
            return
        self._quiet_model_steps += 1
        if self._quiet_model_steps >= MODEL_HOOK_STEPS:
            drop, self.drop_model_hook = self.drop_model_hook, None
            drop()  # type: ignore[misc]

    def restart(self) -> None:
        """Forget the iteration in progress (the hooks were off for a while)."""
        self._in_optimizer = self._model_told = False
        self._quiet_model_steps = 0
        self._cuts.clear()
        self._next_step()

    def _next_step(self) -> None:
        self._pending = self._fetched = self._backward = False
        self._count_next = True
        self._module_samples = 0
        if self.on_close is not None:
            self.on_close()

    def _fallback(self) -> None:
        """A boundary of a loop with no optimizer (yet): provisional until confirmed."""
        if self._confirmed:
            self.close()
            return
        cut = self._probe._cut()
        if cut is None:
            return
        self._cuts.append((cut, self._module_samples))
        self._next_step()
        waited_ns = self._probe._t_start - self._cuts[0][0][0]  # _t_start: the cut's end
        if waited_ns >= CONFIRM_S * 1e9 or len(self._cuts) >= _MAX_CUTS:
            self._confirm()

    def _confirm(self) -> None:
        """No optimizer came: write the provisional steps as they were."""
        self._confirmed = True
        for (start, acc, samples), rows in self._cuts:
            self._probe._write_cut((start, acc, samples), samples or rows)
        self._cuts.clear()

    def _take_back(self) -> None:
        """An optimizer stepped: the provisional steps were parts of its step."""
        for cut, rows in self._cuts:
            self._probe._paste(cut)
            self._module_samples += rows
        self._probe._t_start = self._cuts[0][0][0]
        self._cuts.clear()
