"""Zero-code instrumentation: patch torch so an unmodified training loop feeds the probe.

``traintop run`` cannot edit the user's script, so it hooks the few places every PyTorch loop
passes through, each costing one extra Python call per step or per batch:

* ``_BaseDataLoaderIter.__next__``: the wait for each batch (data phase) and its sample count;
  ``DataLoader.__iter__``: iterator creation, when workers start, counts as data wait too.
  Patching the iterator's class instead of wrapping the iterator keeps its type and ``len()``.
* ``Tensor.backward``: backward time; from batch arrival to backward is counted as "forward".
* torch's global optimizer step pre/post hooks: optimizer time; a closure passed to ``step()``
  (LBFGS, Lightning's automatic optimization) runs the forward and backward, so its time is
  booked as those, and only the update itself as optimizer.
* ``init_process_group``: the rank identity (``traintop.dist_hooks``).
* The outermost module call, found without a global forward hook (``traintop.module_samples``):
  where forward starts, and the batch size of loops with no DataLoader.

Where a step ends is decided from these landmarks by ``traintop.step_boundary``: one step per
loop iteration, whatever updates the weights.  Module forward hooks are deliberately not used
globally: any global one moves every module call onto torch's slow path.  The hooks stand aside
(call straight through) when the script also uses the explicit ``traintop.attach()`` API, in
DataLoader workers, and after any probe failure.  Everything is resolved before anything is
patched, so a torch lacking one API is left untouched.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from traintop import comm_hooks, dist_hooks, facts_agent, handoff
from traintop.loader import infer_batch_size
from traintop.module_samples import ModelFinder
from traintop.probe import BACKWARD, DATA, FORWARD, NO_PHASE, OPTIMIZER, OTHER, Probe, Writer
from traintop.step_boundary import StepBoundary


class _SilentWriter:
    """Stands in for the ring inside DataLoader workers: they must never write."""

    def record(self, *_args: object, **_kwargs: object) -> None: ...

    def set_live(self, *_args: object) -> None: ...

    def close(self) -> None: ...


def install(probe: Probe, torch: ModuleType) -> Hooks:
    """Patch ``torch`` for ``probe``; raises (having patched nothing) if an API is missing."""
    data = importlib.import_module(f"{torch.__name__}.utils.data")
    iterator_class = importlib.import_module(f"{data.__name__}.dataloader")._BaseDataLoaderIter
    loader_class = data.DataLoader
    tensor_class = torch.Tensor
    optimizer_module = importlib.import_module(f"{torch.__name__}.optim.optimizer")
    register_pre = optimizer_module.register_optimizer_step_pre_hook
    register_post = optimizer_module.register_optimizer_step_post_hook
    originals = (iterator_class.__next__, loader_class.__iter__, tensor_class.backward)
    patches = probe._patches
    boundary = StepBoundary(probe)
    finder = ModelFinder(probe, boundary, torch.nn.Module, torch.is_grad_enabled)
    dist_hooks.install(probe, torch)
    probe._writer_factory = _outside_workers(probe, data.get_worker_info)
    patches.swap(LOADER, iterator_class, "__next__", _timed_next(probe, boundary, originals[0]))
    patches.swap(LOADER, loader_class, "__iter__", _timed_iter(probe, originals[1], finder))
    handoff.install(probe, LOADER)
    booker = comm_hooks.install(probe, torch)
    patches.swap(BACKWARD_HOOK, tensor_class, "backward",
                 _timed_backward(probe, boundary, finder, originals[2], booker,
                                 comm_hooks.world_of(torch)))  # fmt: skip
    patches.hook(OPTIMIZER_HOOK, register_pre, _optimizer_pre_hook(probe, boundary))
    patches.hook(OPTIMIZER_HOOK, register_post, _optimizer_post_hook(probe, boundary))
    finder.start()
    facts_agent.install(probe, torch, finder)  # never raises: its parts fail on their own
    probe._auto = True
    global installed
    installed = Hooks(probe, boundary, finder)
    return installed


LOADER, BACKWARD_HOOK, OPTIMIZER_HOOK = "loader", "backward", "optimizer"
EVALUATING = "_traintop_evaluating"  # set on a loader's iterator an evaluation made
installed: Hooks | None = None  # the hooks ``traintop run`` installed in this process


class Hooks:
    """One installation: ``off()`` takes every patch and hook out of torch, ``on()`` puts them
    back (the cost harness's A/B switch, ``benchmarks/onoff.py``).  A step cut by the switch is
    not recorded: the first step after ``on()`` starts at its first landmark."""

    def __init__(self, probe: Probe, boundary: StepBoundary, finder: ModelFinder) -> None:
        self.probe, self.boundary, self.finder = probe, boundary, finder
        self.patches = probe._patches

    def off(self, kinds: frozenset[str] | None = None) -> None:
        """Unpatch (the hooks of ``kinds``, or all); the model search ends first."""
        self.finder.settle()
        self.patches.off(kinds)

    def on(self, kinds: frozenset[str] | None = None) -> None:
        """Patch again; the probe's step accounting starts afresh."""
        self.patches.on(kinds)
        self.finder.offer_unhook()
        self.probe._restart()
        self.boundary.restart()
        self.probe._auto = True


def _outside_workers(probe: Probe, get_worker_info: Callable[[], Any]) -> Callable[..., Writer]:
    """Create the segment lazily, except in a DataLoader worker (spawned ones included)."""
    create = probe._writer_factory

    def factory(phases: Sequence[str]) -> Writer:
        if get_worker_info() is not None:
            probe._auto = False
            return _SilentWriter()
        return create(phases)

    return factory


def _timed_next(probe: Probe, boundary: StepBoundary,
                original: Callable[[Any], Any]) -> Callable[[Any], Any]:  # fmt: skip
    """The wait for each batch as "data", the batch's arrival opening "forward".

    Both boundaries are ``Probe._wait_begin``'s bookkeeping inlined, the second closing "data"
    and opening "forward" in one clock read: a Python call costs about 400 instructions, a fifth
    of a boundary's work, and this runs once per batch.
    """

    @functools.wraps(original)
    def __next__(self: Any) -> Any:
        if not probe._auto:
            return original(self)
        if boundary.optimizers:  # ``batch_wanted`` when no boundary can follow, inlined
            boundary.loader = boundary._fetched = True
        else:
            boundary.batch_wanted()
        resumed = probe._open
        if probe._on:
            try:
                now = probe._clock()
                if resumed >= 0:
                    probe._acc[resumed] += now - probe._open_t
                else:
                    probe._t_start = now
                    resumed = OTHER
                probe._open = DATA
                probe._open_t = now
                probe._live[0] = (now | 15) - (15 - DATA)
            except Exception as exc:
                probe._fail(exc)
        try:
            batch = original(self)
        except BaseException:
            probe._wait_end(resumed, 0)
            raise
        try:
            size = infer_batch_size(batch)
        except Exception as exc:  # a batch type's own bug (its ``shape``): the probe goes quiet
            probe._fail(exc)
            size = 0
        if size is None:
            size = _loader_batch_size(self)
        if probe._on:
            try:
                now = probe._clock()
                probe._acc[probe._open] += now - probe._open_t
                probe._open = FORWARD
                probe._open_t = now
                probe._live[0] = (now | 15) - (15 - FORWARD)
                if not getattr(self, EVALUATING, False):  # an evaluation's rows: no samples
                    probe._samples += size
            except Exception as exc:
                probe._fail(exc)
        return batch

    return __next__


def _loader_batch_size(iterator: Any) -> int:
    """The sampler's batch size: the fallback when the batch holds no tensor-like (else 0)."""
    size = getattr(getattr(iterator, "_index_sampler", None), "batch_size", None)
    return size if isinstance(size, int) else 0


def _timed_iter(probe: Probe, original: Callable[[Any], Any],
                finder: ModelFinder) -> Callable[[Any], Any]:  # fmt: skip
    """Making a loader's iterator is a wait for data; the iterator is marked an evaluation's
    when it is made with gradients off or the model in eval mode (``EVALUATING``): the rows of
    its batches are no training samples."""

    @functools.wraps(original)
    def __iter__(self: Any) -> Any:
        if not probe._auto:
            return original(self)
        resumed = probe._wait_begin()
        try:
            iterator = original(self)
            with contextlib.suppress(AttributeError, TypeError):  # an iterator of a subclass's
                setattr(iterator, EVALUATING, finder.evaluating())
            return iterator
        finally:
            probe._wait_end(resumed, 0)

    return __iter__


def _timed_backward(probe: Probe, boundary: StepBoundary, finder: ModelFinder,
                    original: Callable[..., Any], booker: comm_hooks.WaitBooker | None,
                    world: Any) -> Callable[..., Any]:  # fmt: skip
    """``Tensor.backward`` timed; with a process group, the wait on peers at its end booked as
    "comm" (``comm_hooks``, around the timing).  Without one (``world._default_pg`` None) the
    timing runs inline: one Python frame between the loop and torch, with ``Probe._switch``
    and ``StepBoundary.backward_done`` inlined in it (a call costs about 400 instructions, a
    fifth of a boundary's work)."""

    @functools.wraps(original)
    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        probe._switch(BACKWARD)
        try:
            return original(self, *args, **kwargs)
        finally:
            probe._switch(NO_PHASE)
            boundary.backward_done()

    booked = None if booker is None else comm_hooks._armed_backward(booker, timed)

    @functools.wraps(original)
    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not probe._auto:
            return original(self, *args, **kwargs)
        if finder.searching:  # the forward that made this loss has run: the model is known
            finder.settle()
        if booked is not None and (world is None or world._default_pg is not None):
            return booked(self, *args, **kwargs)
        if probe._on:
            try:
                now = probe._clock()
                open_ = probe._open
                if open_ >= 0:
                    probe._acc[open_] += now - probe._open_t
                else:
                    probe._t_start = now
                probe._open = BACKWARD
                probe._open_t = now
                probe._live[0] = (now | 15) - (15 - BACKWARD)
            except Exception as exc:
                probe._fail(exc)
        try:  # a bare ``backward()`` (most loops) skips the star call: ~900 instructions
            return original(self, *args, **kwargs) if args or kwargs else original(self)
        finally:
            if probe._on:
                try:
                    now = probe._clock()
                    open_ = probe._open
                    if open_ >= 0:
                        probe._acc[open_] += now - probe._open_t
                    else:  # the step restarted inside backward (``Hooks.on``)
                        probe._t_start = now
                    probe._open = OTHER  # no phase: time that records count as "other"
                    probe._open_t = now
                    probe._live[0] = (now | 15) - (15 - OTHER)
                except Exception as exc:
                    probe._fail(exc)
            if boundary.optimizers:  # ``backward_done`` when no boundary can follow
                boundary._backward = True
                if not boundary._in_optimizer:
                    boundary._count_next = True
            else:
                boundary.backward_done()

    return backward


def _optimizer_pre_hook(probe: Probe, boundary: StepBoundary) -> Callable[..., Any]:
    def traintop_optimizer_pre(optimizer: Any, args: Any, kwargs: Any) -> Any:
        if not probe._auto:
            return None
        boundary.optimizer_pre(optimizer)
        if len(args) > 1 or kwargs:  # ``step(closure)``: time the closure
            return _with_timed_closure(probe, args, kwargs)
        return None

    return traintop_optimizer_pre


def _with_timed_closure(probe: Probe, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """``step(closure)`` arguments with the closure timed as forward; None when there is none.

    ``args`` starts with the optimizer itself (torch passes the bound call's arguments).
    """
    if len(args) > 1 and callable(args[1]):
        return (args[0], _timed_closure(probe, args[1]), *args[2:]), kwargs
    if callable(kwargs.get("closure")):
        return args, {**kwargs, "closure": _timed_closure(probe, kwargs["closure"])}
    return None


def _timed_closure(probe: Probe, closure: Callable[[], Any]) -> Callable[[], Any]:
    """The closure computes the loss (and its backward, timed by the backward hook)."""

    @functools.wraps(closure)
    def timed_closure() -> Any:
        probe._switch(FORWARD)
        try:
            return closure()
        finally:
            probe._switch(OPTIMIZER)

    return timed_closure


def _optimizer_post_hook(probe: Probe, boundary: StepBoundary) -> Callable[..., None]:
    def traintop_optimizer_post(optimizer: Any, _args: Any, _kwargs: Any) -> None:
        if probe._auto:
            boundary.optimizer_post(optimizer)

    return traintop_optimizer_post
