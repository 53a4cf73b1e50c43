"""Name the bottleneck: pure functions over windows of snapshots (no I/O, no UI).

The public surface is ``traintop.diagnosis.api``; the package hands its names out on first use
(``from traintop.diagnosis import diagnose`` works as before), so that importing one module of
the package (the monitor's first frame needs the model and a few text helpers) does not load
the engine and every rule: 0.05 s of the monitor's start.
"""

from __future__ import annotations

from importlib import import_module
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traintop.diagnosis.api import *  # noqa: F403


def __getattr__(name: str) -> Any:
    """``api``'s public names (and its ``__all__``), imported when first asked for.  A module
    of the package (``from traintop.diagnosis import kill_words``) is imported as itself: going
    through ``api`` first would load the engine from inside a module the engine imports."""
    if find_spec(f"{__name__}.{name}") is not None:
        return import_module(f"{__name__}.{name}")
    api = import_module("traintop.diagnosis.api")
    if name == "__all__" or name in api.__all__:
        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
