"""Zero-code communication timing: the time a rank waits on its peers at the end of backward
becomes the "comm" phase.

DDP all-reduces gradient buckets from autograd hooks *while* backward still computes; the rank
only waits at the end, when the reducer's final callback blocks on every bucket's future before
``backward()`` returns (FSDP's post-backward final callback waits on its reduce-scatters the same
way).  Booking the overlapped all-reduces would call a healthy job network-bound, so only that
tail is booked: from the moment autograd has run the graph's last node until backward returns.

The moment is found with the engine's own mechanism: final callbacks run in the order they are
queued, once the graph is done.  A hook on the tensor ``backward()`` is called on fires first in
every backward and queues ours, so ours runs before DDP's (queued when the last bucket is ready)
and switches the probe to "comm"; the backward wrapper of ``torch_hooks`` closes the phase when
backward returns.

Nothing of DDP is touched: no comm hook is installed (DDP takes one per model, the user's stays
theirs, later registrations work as without traintop), the reduction runs DDP's own code, so
gloo and NCCL, every built-in hook and the numerics are exactly as without traintop.  The cost is
one tensor hook and one final callback per backward, independent of the number of buckets
(``benchmarks/bench_comm.py`` compares it with a booking comm hook and with wrapping the
``torch.distributed`` entry points).  It runs only while a process group exists, so
single-process jobs never see a "comm" phase.

Collectives a script (or FSDP on the CPU) calls *blocking*, through ``torch.distributed``'s own
functions (``dist.all_reduce(grad)`` after backward, a ``barrier()``), are waits on peers too,
outside DDP: those entry points are wrapped, and a call with ``async_op=False`` on the training
thread is booked as "comm" for as long as it blocks (nested: the phase it interrupts resumes).
Asynchronous calls are left alone (their wait is in ``work.wait()``), and so is any call while
torch.compile traces.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from traintop.phase_context import PhaseContext
from traintop.probe import Probe

COMM_PHASE = "comm"
"""The phase name the Training panel and the network rule read as waiting on peers."""

COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "reduce", "all_to_all", "all_to_all_single",
    "gather", "scatter", "barrier", "all_gather_object", "broadcast_object_list",
)  # fmt: skip
"""``torch.distributed`` functions that block every rank until its peers have joined."""


class WaitBooker:
    """Per backward: a hook on the root tensor queues the final callback that opens "comm"."""

    def __init__(
        self,
        probe: Probe,
        queue_callback: Callable[[Callable[[], None]], None],
        distributed: Callable[[], bool],
    ) -> None:
        self._probe = probe
        self._queue = queue_callback
        self._distributed = distributed
        self._index: int | None = None

    def arm(self, tensor: Any) -> Any:
        """Before ``tensor.backward()``: the hook's handle (remove it after), None if not armed."""
        if not self._probe._auto or tensor.grad_fn is None or not self._distributed():
            return None
        try:
            return tensor.register_hook(self._backward_started)
        except Exception as exc:
            self._probe._fail(exc)
            return None

    def _backward_started(self, _grad: Any) -> None:
        """The graph's first node runs: queue ours ahead of DDP's and FSDP's final callbacks."""
        try:
            self._queue(self._compute_done)
        except Exception as exc:
            self._probe._fail(exc)

    def _compute_done(self) -> None:
        """Every node has run: from here until backward returns, the rank waits on its peers."""
        if not self._probe._auto:
            return
        try:
            if self._index is None:
                self._index = self._probe._slot(COMM_PHASE)
        except Exception as exc:
            self._probe._fail(exc)
            return
        self._probe._switch(self._index)


class CollectiveBooker:
    """Books blocking collective calls made on the training thread as "comm", nested."""

    def __init__(self, probe: Probe, compiling: Callable[[], bool]) -> None:
        self._probe = probe
        self._compiling = compiling
        self._thread = threading.get_ident()  # the thread that imports torch runs the loop
        self._context: PhaseContext | None = None

    def context(self) -> PhaseContext | None:
        """The "comm" phase block, or None where this call must not be booked."""
        probe = self._probe  # compiling first: under dynamo it folds to True, nothing traced
        if self._compiling() or not probe._auto or threading.get_ident() != self._thread:
            return None
        if self._context is None:
            self._context = PhaseContext(probe, probe._slot(COMM_PHASE))
        return self._context


def install(probe: Probe, torch: ModuleType) -> None:
    """Wrap ``Tensor.backward`` (already timed by ``torch_hooks``) to arm the booker, and the
    blocking collectives.  Torch built without distributed has no peers: nothing is patched."""
    dist = torch.distributed
    if not dist.is_available():
        return
    engine = torch.autograd.Variable._execution_engine
    booker = WaitBooker(probe, engine.queue_callback, dist.is_initialized)
    collectives = CollectiveBooker(probe, torch.compiler.is_compiling)
    home = dist.distributed_c10d
    wrapped = {name: _booked_collective(collectives, getattr(home, name)) for name in COLLECTIVES}
    torch.Tensor.backward = _armed_backward(booker, torch.Tensor.backward)
    for name, function in wrapped.items():
        for module in (dist, home):
            if getattr(module, name, None) is function.__wrapped__:
                setattr(module, name, function)


def _booked_collective(booker: CollectiveBooker, original: Callable[..., Any]) -> Any:
    """``original`` timed as "comm" unless called with ``async_op=True`` (or not bookable)."""
    params = list(inspect.signature(original).parameters)
    position = params.index("async_op") if "async_op" in params else None

    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("async_op") or (position is not None and len(args) > position
                                      and args[position]):  # fmt: skip
            return original(*args, **kwargs)
        context = booker.context()
        if context is None:
            return original(*args, **kwargs)
        with context:
            return original(*args, **kwargs)

    return collective


def _armed_backward(booker: WaitBooker, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        handle = booker.arm(self)
        if handle is None:
            return original(self, *args, **kwargs)
        try:
            return original(self, *args, **kwargs)
        finally:
            handle.remove()

    return backward
