"""A "torch" with just what the sync hook (traintop/sync_hook.py) touches, behaving as torch's.

Once the sync debug mode is "warn", ``Scalar().item()`` and ``.cpu()`` raise torch's own warning
text from C code (``functools.partial`` of the C ``warnings.warn``: no Python frame of their own,
so the warning is attributed to the calling line, as torch's is); "error" raises torch's
RuntimeError.  ``cuda.synchronize()``, ``cuda.Event.synchronize()`` and
``accelerator.synchronize()`` warn about nothing, as in torch.  ``scaler_step`` syncs from
inside "torch", as GradScaler does.
"""

import functools
import types
import warnings

__version__ = "0.0-fake-cuda"
SYNC_TEXT = "called a synchronizing CUDA operation"
_TEXT = SYNC_TEXT + " (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:186.)"
_state = {"mode": 0, "device_syncs": 0}
_warn = functools.partial(warnings.warn, _TEXT, UserWarning, 1)


def _raise() -> None:
    raise RuntimeError(SYNC_TEXT)


def _sync_op():
    return {0: int, 1: _warn, 2: _raise}[_state["mode"]]


class Scalar:
    item = property(lambda self: _sync_op())
    cpu = item


def scaler_step(scalar: Scalar) -> None:
    """Like GradScaler.step: the sync happens on a line of torch's."""
    scalar.item()


def _set_sync_debug_mode(debug_mode) -> None:
    modes = {"default": 0, "warn": 1, "error": 2}
    if isinstance(debug_mode, str) and debug_mode not in modes:
        raise RuntimeError("invalid value of debug_mode")
    _state["mode"] = modes.get(debug_mode, debug_mode)


def _synchronize(device=None) -> None:
    _state["device_syncs"] += 1


class Event:
    def synchronize(self) -> None:
        _state["device_syncs"] += 1


cuda = types.SimpleNamespace(
    is_initialized=lambda: True,
    set_sync_debug_mode=_set_sync_debug_mode,
    get_sync_debug_mode=lambda: _state["mode"],
    synchronize=_synchronize,
    Event=Event,
)
accelerator = types.SimpleNamespace(synchronize=lambda device=None: cuda.synchronize(device))
