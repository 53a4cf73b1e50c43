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

Each collective booked here, and each end-of-backward wait, also goes into the process's
collective ledger (``traintop.ledger``): group, sequence number, op, dtype and dims, enter and
exit time, so a monitor can tell which rank never reached the collective the others wait in.
The ledger is written whether or not the script times its own phases.  DDP's bucket
all-reduces are issued from C++ and no Python hook sees them one by one: the ledger holds the
wait for them at the end of backward (op ``backward``, its own group), and says no more.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from collections.abc import Callable
from threading import get_ident
from time import monotonic_ns
from types import FrameType, ModuleType
from typing import Any

from traintop.ledger import NOT_WRITTEN, GroupInfo, Ledger, group_info
from traintop.phase_context import OTHER
from traintop.probe import Probe
from traintop.ring_format import BACKWARD_GROUP, DTYPES, LEDGER_GROUP, OPS

COMM_PHASE = "comm"
COLLECTIVE_HOOK = "collectives"  # the patches' kind (traintop.patches)
"""The phase name the Training panel and the network rule read as waiting on peers."""

COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "reduce", "all_to_all", "all_to_all_single",
    "gather", "scatter", "barrier", "all_gather_object", "broadcast_object_list",
)  # fmt: skip
"""``torch.distributed`` functions that block every rank until its peers have joined."""

TENSOR_PARAMS = {
    "all_reduce": "tensor", "all_gather": "tensor", "all_gather_into_tensor": "input_tensor",
    "reduce_scatter": "output", "reduce_scatter_tensor": "input", "broadcast": "tensor",
    "reduce": "tensor", "all_to_all": "input_tensor_list", "all_to_all_single": "input",
    "gather": "tensor", "scatter": "tensor",
}  # fmt: skip
"""The argument whose shape and dtype the ledger keeps (the first tensor of a list)."""
DTYPE_NAMES = {
    "float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64",
    "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "bool",
    "complex64": "c64", "complex128": "c128", "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2",
}  # fmt: skip


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
        self._word = NOT_WRITTEN  # the ledger entry of this backward's wait, until it returns
        self._caller: FrameType | None = None  # where backward() was called, for the ledger

    def arm(self, tensor: Any) -> Any:
        """Before ``tensor.backward()``: the hook's handle (remove it after), None if not armed."""
        if not self._probe._auto or tensor.grad_fn is None or not self._distributed():
            return None
        try:
            self._caller = sys._getframe(2)  # the caller of backward(), on the stack throughout
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
        ledger = self._probe._ledger
        if self._caller is not None and _backward_group(ledger) is not None:
            self._word = ledger.collective(BACKWARD_GROUP, BACKWARD_OP, None, self._caller)

    def finish(self, raised: bool) -> None:
        """Backward returned (or raised): the wait it ended with is over."""
        word, self._word, self._caller = self._word, NOT_WRITTEN, None
        self._probe._ledger.exit(word, raised)


BACKWARD_OP = OPS.index("backward")


class CollectiveBooker:
    """Books blocking collective calls made on the training thread as "comm", nested; the
    probe's ledger records each (its ``describe`` and ``dtypes`` set by ``install``).  Opening
    and closing the phase is inlined in the wrapper (``_booked_collective``), ``leave`` kept for
    a collective that raises."""

    def __init__(self, probe: Probe, compiler: Any) -> None:
        self._probe = probe
        self._compiler = compiler  # its ``_is_compiling_flag``: torch.compile or export traces
        self._thread = threading.get_ident()  # the thread that imports torch runs the loop
        self._index: int | None = None  # the "comm" slot, made at the first booked call
        self.ledger: Ledger = probe._ledger

    def comm_slot(self) -> int:
        """The "comm" phase's slot, made at the first booked call."""
        if self._index is None:
            self._index = self._probe._slot(COMM_PHASE)
        return self._index

    def leave(self, resumed: int, now: int) -> None:
        """The collective returned at ``now``: close what is open, resume the phase it paused."""
        probe = self._probe
        try:
            if probe._open >= 0:
                probe._acc[probe._open] += now - probe._open_t
            probe._open = resumed
            probe._open_t = now
            probe._live[0] = (now | 15) - (15 - resumed)
        except Exception as exc:
            probe._fail(exc)


NO_COMM = -2  # "comm" was not opened (the script times its own phases, or a failure)


def install(probe: Probe, torch: ModuleType) -> WaitBooker | None:
    """Wrap the blocking collectives; the booker of the end-of-backward wait, which
    ``torch_hooks``' timed backward arms (None: torch built without distributed, no peers)."""
    dist = torch.distributed
    if not dist.is_available():
        return None
    engine = torch.autograd.Variable._execution_engine
    booker = WaitBooker(probe, engine.queue_callback, dist.is_initialized)
    install_collectives(probe, torch)
    return booker


def world_of(torch: ModuleType) -> Any:
    """The object whose ``_default_pg`` is the default process group, for a check that costs
    an attribute read on every ``backward()`` (``dist.is_initialized`` costs a few calls);
    None where this torch keeps it elsewhere (then ask the booker)."""
    world = getattr(getattr(torch.distributed, "distributed_c10d", None), "_world", None)
    return world if hasattr(world, "_default_pg") else None


def install_collectives(probe: Probe, torch: ModuleType) -> None:
    """Wrap the blocking ``torch.distributed`` collectives for the ledger (and the "comm"
    booking of the zero-code mode), once per probe: ``traintop.attach()`` does it too when
    torch is already imported, so an explicit probe has its ledger without ``traintop run``."""
    dist = torch.distributed
    ledger = probe._ledger
    if not dist.is_available() or ledger.describe is not None:
        return
    ledger.describe, ledger.dtypes = _group_describer(ledger, torch), _dtypes(torch)
    collectives = CollectiveBooker(probe, compile_flags(torch))
    home = dist.distributed_c10d
    wrapped = {name: _booked_collective(collectives, getattr(home, name)) for name in COLLECTIVES}
    for name, function in wrapped.items():
        for module in (dist, home):
            if getattr(module, name, None) is function.__wrapped__:
                probe._patches.swap(COLLECTIVE_HOOK, module, name, function)


class Compiling:
    """``_is_compiling_flag`` asked of a function: a torch whose ``torch.compiler`` has no
    such flag (its ``is_compiling()`` is asked instead), or a test's."""

    __slots__ = ("_call",)

    def __init__(self, call: Callable[[], bool]) -> None:
        self._call = call

    @property
    def _is_compiling_flag(self) -> bool:
        return self._call()


def compile_flags(torch: ModuleType) -> Any:
    """What says whether torch.compile or export traces: ``torch.compiler`` itself, whose
    ``_is_compiling_flag`` is what ``is_compiling()`` returns.  Read as an attribute it costs
    about 1,000 instructions less on every collective (callgrind: 22.7 k -> 21.7 k); dynamo,
    tracing the wrapper, reads it as True (it holds the flag while it compiles) and sets no
    guard that would recompile (tests/test_comm_hooks.py)."""
    compiler = torch.compiler
    return compiler if hasattr(compiler, "_is_compiling_flag") else Compiling(compiler.is_compiling)


def _group_describer(ledger: Ledger, torch: ModuleType) -> Callable[[Any], GroupInfo]:
    """What the ledger says of a process group (None: the default), resolved once per group."""
    c10d = torch.distributed.distributed_c10d

    def describe(group: Any) -> GroupInfo:
        pg = group if group is not None else c10d._get_default_group()
        name = str(getattr(pg, "group_name", "") or "?")
        desc = str(getattr(pg, "group_desc", "") or "")
        if desc and desc != "undefined":
            name = f"{name}:{desc}"
        info = ledger.groups[group] = group_info(name, int(pg.size()), _timeout_ms(torch, pg))
        return info

    return describe


def _timeout_ms(torch: ModuleType, pg: Any) -> int:
    """The group's collective timeout, read from its backend (0 when no backend tells)."""
    for device in ("cpu", "cuda"):
        try:
            timeout = pg._get_backend(torch.device(device)).options._timeout
            return min(int(timeout.total_seconds() * 1000), 0xFFFF_FFFF)
        except Exception:
            continue
    return 0


def _backward_group(ledger: Ledger) -> GroupInfo | None:
    """The default group's size and timeout under the name of the end-of-backward wait (None:
    no default group to describe)."""
    info = ledger.groups.get(BACKWARD_GROUP)
    if info is None and ledger.describe is not None:
        try:
            default = ledger.groups.get(None) or ledger.describe(None)
        except Exception:
            return None
        size, timeout, _name = LEDGER_GROUP.unpack(default[0])
        info = ledger.groups[BACKWARD_GROUP] = group_info(BACKWARD_GROUP, size, timeout)
    return info


def _dtypes(torch: ModuleType) -> dict[Any, int]:
    """torch dtype -> the ledger's dtype code (ring_format.DTYPES)."""
    codes = {}
    for name, short in DTYPE_NAMES.items():
        dtype = getattr(torch, name, None)
        if dtype is not None:
            codes[dtype] = DTYPES.index(short)
    return codes


def _booked_collective(booker: CollectiveBooker, original: Callable[..., Any]) -> Any:
    """``original`` timed as "comm" and written into the ledger, unless called with
    ``async_op=True`` or off the training loop."""
    params = list(inspect.signature(original).parameters)
    position = params.index("async_op") if "async_op" in params else None
    name = original.__name__
    op = OPS.index(name) if name in OPS else 0
    tensor_at, tensor_name = _param(params, TENSOR_PARAMS.get(name))
    listed = tensor_name.endswith("_list")  # all_to_all: the shape is its first tensor's
    group_at, _ = _param(params, "group")
    ledger = booker.ledger

    probe, thread, compiler = booker._probe, booker._thread, booker._compiler
    clock = probe._clock
    shared = clock is ledger._clock  # one clock read serves the phase and the ledger

    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("async_op") or (position is not None and len(args) > position
                                      and args[position]):  # fmt: skip
            return original(*args, **kwargs)
        # the training loop's own call, not traced (the compile flag first: dynamo reads it as
        # True, nothing traced) nor on another thread
        if compiler._is_compiling_flag or get_ident() != thread or not probe._on:
            return original(*args, **kwargs)
        n = len(args)
        group = args[group_at] if n > group_at else kwargs.get("group")
        tensor = args[tensor_at] if n > tensor_at else kwargs.get(tensor_name)
        if listed:
            tensor = tensor[0] if tensor else None
        now = clock()
        word = ledger.collective(group, op, tensor, sys._getframe(1), now if shared else 0)
        # Open "comm" at ``now``, ``PhaseContext.__enter__`` without its stack, inlined (a call
        # costs ~400 instructions); the phase it pauses resumes at the end, so collectives
        # calling collectives nest.
        resumed = NO_COMM
        if probe._auto:
            index = booker._index
            if index is None:
                index = booker.comm_slot()
            try:
                resumed = probe._open
                if resumed >= 0:
                    probe._acc[resumed] += now - probe._open_t
                else:  # the first boundary since the probe was made (traintop.probe)
                    probe._t_start = now
                    resumed = OTHER
                probe._open = index
                probe._open_t = now
                probe._live[0] = (now | 15) - (15 - index)
            except Exception as exc:
                probe._fail(exc)
                resumed = NO_COMM
        try:  # no keywords (the usual call) skips building the call's keyword dict
            result = original(*args, **kwargs) if kwargs else original(*args)
        except BaseException:
            ledger.exit(word, True)
            if resumed != NO_COMM:
                booker.leave(resumed, clock())
            raise
        end = clock()
        if resumed != NO_COMM:  # ``booker.leave(resumed, end)`` inlined
            try:
                if probe._open >= 0:
                    probe._acc[probe._open] += end - probe._open_t
                probe._open = resumed
                probe._open_t = end
                probe._live[0] = (end | 15) - (15 - resumed)
            except Exception as exc:
                probe._fail(exc)
        if word >= 0:  # Ledger.exit inlined: on this path the call costs as much as the store
            try:
                ledger._q[word] = (end if shared else monotonic_ns()) & -2
            except Exception:  # released (closed, forked): Ledger.exit would do the same
                ledger.forget()
        return result

    return collective


def _param(params: list[str], name: str | None) -> tuple[int, str]:
    """Position and name of a parameter; an impossible position when there is none."""
    if name is None or name not in params:
        return 1 << 30, ""
    return params.index(name), name


def _armed_backward(booker: WaitBooker, original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (torch_hooks' timed backward) with the end-of-backward wait booked."""

    @functools.wraps(original)
    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        handle = booker.arm(self)
        if handle is None:
            return original(self, *args, **kwargs)
        try:
            result = original(self, *args, **kwargs)
        except BaseException:
            booker.finish(True)
            raise
        finally:
            handle.remove()
        booker.finish(False)
        return result

    return backward
