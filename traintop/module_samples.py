"""Samples for loops with no DataLoader: the rows fed to the outermost module of each step.

A global forward hook would see every module call, but it moves all of them onto torch's slow
path for the whole run.  So ``Module.__call__`` is wrapped only until the model is found: the
modules called at nesting depth 0 while autograd records (an evaluation pass under ``no_grad``
is not the training forward; a GAN has two).  At the first ``backward()`` (or the first step,
or after 64 such calls with neither) the wrapper is removed, and a forward pre-hook on each of
those modules alone, a call or two per step, reports the rows of its first input from then on;
each call also marks the start of the forward phase.  Even that hook moves the model's call onto
torch's slow path (a few µs a step), so it goes again once it tells nothing the other landmarks
do not: after ``step_boundary.MODEL_HOOK_STEPS`` steps in a row in which the DataLoader counted
the samples, forward had begun at the batch's arrival, and an optimizer ended the step (most
loops); loops without a DataLoader or an optimizer, and GANs, keep it.

The hook must not leak into the user's files: ``torch.save(model)`` and ``copy.deepcopy`` pickle
a module's hook dicts, and a hook of ours there would make them fail (or need traintop to load).
So the two dicts it goes into pickle as plain ``OrderedDict`` without it (``_HooksWithout``).

The batch dimension is the leading one, except in models built on sequence-first layers (an RNN
or attention with ``batch_first=False``, as in PyTorch's word_language_model example): their
inputs are (sequence, batch, ...), so the rows are the second dimension.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from traintop.probe import Probe
from traintop.step_boundary import StepBoundary

_MAX_DEPTH = 3
_MAX_SEARCH_CALLS = 64  # Module.__call__ is unwrapped after this many, backward() or not
_MAX_MODELS = 8  # outermost modules hooked: a model, a GAN's two, a loss module or so
_CONTAINERS = (tuple, list, type({}.values()))
MODEL_HOOK = "model"  # the patches' kind (traintop.patches)


def evaluating(grad_enabled: Callable[[], bool], models: Iterable[Any]) -> bool:
    """Whether the loop evaluates now: gradients off (``no_grad``, ``inference_mode``) or a
    model it trains in eval mode (read when a loader's iterator is made: not per batch)."""
    return not grad_enabled() or not all(getattr(model, "training", True) for model in models)


class ModelFinder:
    """Finds the training loop's outermost module, then reports each call's batch rows."""

    def __init__(self, probe: Probe, boundary: StepBoundary, module_class: type,
                 grad_enabled: Callable[[], bool]) -> None:  # fmt: skip
        self._probe = probe
        self._boundary = boundary
        self._class = module_class
        self._original = module_class.__call__
        self._grad_enabled = grad_enabled
        self._depth = 0
        self._calls = 0  # outermost calls seen while searching
        self._models: dict[int, int] = {}  # id() of each outermost module -> its row dimension
        self._found: list[Any] = []
        self.searching = False

    def evaluating(self) -> bool:
        """Whether the loop evaluates now (:func:`evaluating`, of the models found)."""
        return evaluating(self._grad_enabled, self._found)

    def start(self) -> None:
        """Wrap ``Module.__call__`` until ``settle()``; the boundary settles at its first step."""
        self._class.__call__ = self._searching_call()
        self.searching = True
        self._boundary.on_close = self.settle

    def settle(self) -> None:
        """Stop searching: unwrap ``Module.__call__`` and hook the model found, if any."""
        if not self.searching:
            return
        self.searching = False
        self._boundary.on_close = None
        self._class.__call__ = self._original
        for model in self._found:
            self._probe._patches.hook(MODEL_HOOK, functools.partial(hook_privately, model),
                                      self._pre_hook)  # fmt: skip
        self.offer_unhook()

    def offer_unhook(self) -> None:
        """Let the boundary take the model's hook out once it tells nothing new."""
        if self._found:
            self._boundary.drop_model_hook = self._unhook

    def _unhook(self) -> None:
        """The loop's other landmarks tell all the hook did: give the model torch's fast path."""
        self._probe._patches.off(frozenset({MODEL_HOOK}))

    def _searching_call(self) -> Callable[..., Any]:
        original = self._original

        @functools.wraps(original)
        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            if self._depth == 0 and self._grad_enabled():
                self._outermost(module, args, kwargs)
            self._depth += 1
            try:
                return original(module, *args, **kwargs)
            finally:
                self._depth -= 1

        return __call__

    def _outermost(self, module: Any, args: tuple, kwargs: dict) -> None:
        self._calls += 1
        if self._calls > _MAX_SEARCH_CALLS or not self._probe._auto:  # an inference loop, or
            self.settle()  # the explicit API in use; the hook now in place reports this call
            return
        try:
            if id(module) not in self._models and len(self._found) < _MAX_MODELS:
                self._models[id(module)] = 1 if sequence_first(module) else 0
                self._found.append(module)  # keeps the id valid while searching
            if id(module) in self._models:
                self._report(module, args, kwargs)
        except Exception as exc:  # a model whose modules() or shapes misbehave
            self._probe._fail(exc)

    def _pre_hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        if self._probe._auto:
            try:
                self._report(module, args, kwargs)
            except Exception as exc:
                self._probe._fail(exc)

    def _report(self, module: Any, args: tuple, kwargs: dict) -> None:
        rows = input_rows((*args, *kwargs.values()), self._models[id(module)])
        self._boundary.model_called(rows or 0)


class _HooksWithout(OrderedDict):
    """A module's hook dict that pickles (and deep-copies) as a plain one without our hooks."""

    def __init__(self, items: Any = ()) -> None:
        super().__init__(items)
        self.ours: set[int] = set()

    def __reduce__(self) -> tuple:
        return OrderedDict, ([(k, v) for k, v in self.items() if k not in self.ours],)


def hook_privately(model: Any, hook: Callable[..., None]) -> Any:
    """``register_forward_pre_hook(hook, with_kwargs=True)``, invisible to pickling; its handle."""
    pre, with_kwargs = model._forward_pre_hooks, model._forward_pre_hooks_with_kwargs
    if not isinstance(pre, _HooksWithout):
        model._forward_pre_hooks = pre = _HooksWithout(pre)
    if not isinstance(with_kwargs, _HooksWithout):
        model._forward_pre_hooks_with_kwargs = with_kwargs = _HooksWithout(with_kwargs)
    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    pre.ours.add(handle.id)
    with_kwargs.ours.add(handle.id)
    return handle


def sequence_first(model: Any) -> bool:
    """True when the model holds a layer that reads (sequence, batch, ...) inputs."""
    return any(getattr(m, "batch_first", None) is False for m in model.modules())


def input_rows(inputs: Iterable[Any], row_dim: int, depth: int = 0) -> int | None:
    """Size along ``row_dim`` (the leading one for 1-d) of the first tensor-like in ``inputs``."""
    for item in inputs:
        shape = getattr(item, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[row_dim if len(shape) > row_dim else 0])
        nested = item.values() if isinstance(item, Mapping) else item
        if depth < _MAX_DEPTH and isinstance(nested, _CONTAINERS):
            rows = input_rows(nested, row_dim, depth + 1)
            if rows is not None:
                return rows
    return None
