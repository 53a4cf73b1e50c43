"""Loaded by every Python process that ``traintop run`` starts (the shim dir is on PYTHONPATH).

It must be invisible: the script runs, prints and computes exactly as without it.  So it does
little at startup: it registers a one-shot import hook that waits for ``import torch`` and then
patches torch through ``traintop.torch_hooks``; in the process ``traintop run`` started (or a
launcher's worker) it makes the run's segment now, so the run is seen from its first second
(``traintop.run_start``); then it runs the user's own sitecustomize, if any, which ours shadows
on sys.path (the opentelemetry-instrument / ddtrace-run pattern).  Any failure of ours costs one
warning line on stderr and leaves the process alone.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from typing import Any

_SHIM_DIR = os.path.dirname(os.path.realpath(__file__))
_PACKAGE_DIR = os.path.dirname(_SHIM_DIR)


def _warn(exc: BaseException) -> None:
    print(f"traintop: instrumentation disabled ({type(exc).__name__}: {exc})", file=sys.stderr)


class _TorchImportHook:
    """Meta path finder that only reacts to ``torch`` and removes itself on first sight."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.loader is not None:
            _wrap_exec(spec.loader)
        return spec


def _wrap_exec(loader: Any) -> None:
    """Instrument torch right after its ``__init__`` ran (torch.optim and data are loaded)."""
    original = loader.exec_module

    def exec_module(module: Any) -> None:
        del loader.exec_module  # back to the class's method: this loader is torch's alone
        original(module)
        _instrument(module)

    loader.exec_module = exec_module


def _instrument(torch: Any) -> None:
    try:
        _import_traintop()
        from traintop import attach, torch_hooks

        torch_hooks.install(attach(), torch)
    except Exception as exc:
        _warn(exc)


def _import_traintop() -> None:
    """Load the traintop package this shim belongs to, by path: installed or not, same version."""
    if hasattr(sys.modules.get("traintop"), "attach"):
        return
    init = os.path.join(_PACKAGE_DIR, "__init__.py")
    spec = importlib.util.spec_from_file_location(
        "traintop", init, submodule_search_locations=[_PACKAGE_DIR]
    )
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["traintop"] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]


def _start_run() -> None:
    """This process's segment now, if it is a run (``traintop.run_start``); every other
    process (a run's own children) pays one environment lookup."""
    if os.environ.get("TRAINTOP_STARTUP_PID", "0") in ("", "0"):
        return
    try:
        _import_traintop()
        from traintop import attach, run_start

        run_start.begin(attach)
    except Exception as exc:
        _warn(exc)


def _chain_user_sitecustomize() -> None:
    """Run the next ``sitecustomize`` on sys.path: the one ours hides.  Its errors are its own."""
    path = [p for p in sys.path if os.path.realpath(p or os.curdir) != _SHIM_DIR]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module  # the user's module keeps the name, as without us
    spec.loader.exec_module(module)


try:
    sys.meta_path.insert(0, _TorchImportHook())
except Exception as _exc:
    _warn(_exc)
_start_run()
_chain_user_sitecustomize()
