"""The zero-code hooks in this process's torch for one test, every hook out afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from traintop import torch_hooks
from traintop.probe import Probe


@contextlib.contextmanager
def hooked_torch(probe: Probe) -> Iterator[torch_hooks.Hooks]:
    """``probe``'s hooks installed; ``off()`` and the installation forgotten on the way out."""
    hooks = torch_hooks.install(probe, torch)
    try:
        yield hooks
    finally:
        hooks.off()
        torch_hooks.installed = None
