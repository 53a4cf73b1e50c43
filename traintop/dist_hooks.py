"""Hook ``torch.distributed.init_process_group``: the rank identity every launcher ends in.

There is no callback for "a process group was created", so the function is wrapped where
callers find it (``torch.distributed``, its ``distributed_c10d`` home, and ``device_mesh``, which
imported it by name).  The wrapper calls the original first and untouched (its exceptions are
the caller's), then records the identity; a segment that already exists gets its header
rewritten (``RingWriter.rewrite_identity``), and again once the ranks agreed on the run's
token (``traintop.run_token``: two runs on one rendezvous address are two jobs).  A group made
some other way is still found when the segment is created (``dist_identity.current``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from traintop import dist_identity, flight_recorder, run_token
from traintop.probe import Probe

_HOMES = ("distributed_c10d", "device_mesh")


def install(probe: Probe, torch: ModuleType) -> None:
    """Wrap ``init_process_group`` (nothing to do on a torch built without distributed)."""
    dist = torch.distributed
    if not dist.is_available():
        return
    homes = [dist, *(importlib.import_module(f"{dist.__name__}.{m}") for m in _HOMES)]
    original = homes[1].init_process_group
    wrapped = _hooked(probe, dist, original)
    for module in homes:
        if getattr(module, "init_process_group", None) is original:
            probe._patches.swap("init", module, "init_process_group", wrapped)


def _hooked(probe: Probe, dist: ModuleType, original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        try:  # NCCL: the recorder knows what the GPUs have not finished (traintop.flight_recorder)
            backend = signature.bind_partial(*args, **kwargs).arguments.get("backend")
            flight_recorder.enable_before_init(backend, dist_cuda(dist))
        except Exception as exc:
            probe._fail(exc)
        result = original(*args, **kwargs)
        try:
            bound = signature.bind_partial(*args, **kwargs).arguments
            identity = dist_identity.from_group(dist, bound.get("init_method"), bound.get("store"))
            adopt(probe, identity)
            run_token.share(dist, identity, functools.partial(adopt_run_id, probe))
        except Exception as exc:  # our failure only: the group exists, training goes on
            probe._fail(exc)
        return result

    return init_process_group


def dist_cuda(dist: ModuleType) -> Callable[[], bool]:
    """``torch.cuda.is_available`` of the torch that ``dist`` belongs to (False without)."""
    cuda = getattr(sys.modules.get(dist.__name__.rsplit(".", 1)[0]), "cuda", None)
    return getattr(cuda, "is_available", lambda: False)


def adopt(probe: Probe, identity: dist_identity.Identity) -> None:
    """Make ``identity`` the process's, and the existing segment's if there is one; the
    ledger describes its groups afresh (a new default group is a new object)."""
    dist_identity.remember(identity)
    probe._ledger.groups.clear()
    rewrite = getattr(probe._writer, "rewrite_identity", None)
    if rewrite is not None:
        rewrite(identity)


def adopt_run_id(probe: Probe, identity: dist_identity.Identity) -> None:
    """The same identity with the run's token in its run id (``traintop.run_token``), from
    whichever thread learnt it: the segment's header says it from now on."""
    dist_identity.remember(identity)
    rewrite = getattr(probe._writer, "rewrite_identity", None)
    if rewrite is not None:
        rewrite(identity)
