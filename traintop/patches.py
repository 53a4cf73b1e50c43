"""Everything the zero-code hooks changed in torch, kept so it can be taken out and put back.

The probe's cost is measured by switching its hooks off and on inside one warm process
(``benchmarks/onoff.py``): whole runs with and without ``traintop run`` differ by more than the
probe costs (process start, allocator and clock state).  Off must mean what a run without
traintop has, not a flag that patched code tests on every call, so each replaced attribute and
each registered hook is recorded here, in install order: ``off()`` restores the originals
(newest first, so a wrapper of a wrapper unwinds) and removes the hooks; ``on()`` puts them back
in the order they were made.  Nothing here runs on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Handle(Protocol):
    """What torch's ``register_*_hook`` functions return."""

    def remove(self) -> None: ...


Register = Callable[[Callable[..., Any]], Handle]


class Patches:
    """The attributes and hooks of one installation; every entry has a kind (its hook site)."""

    def __init__(self) -> None:
        self._swaps: list[tuple[str, Any, str, Any, Any]] = []  # kind, owner, name, old, new
        self._hooks: list[list[Any]] = []  # [kind, register, hook, handle or None]

    def swap(self, kind: str, owner: Any, name: str, replacement: Any) -> None:
        """``setattr(owner, name, replacement)``, remembering what was there."""
        self._swaps.append((kind, owner, name, getattr(owner, name), replacement))
        setattr(owner, name, replacement)

    def hook(self, kind: str, register: Register, hook: Callable[..., Any]) -> None:
        """``register(hook)``, keeping its handle to remove it while off."""
        self._hooks.append([kind, register, hook, register(hook)])

    def kinds(self) -> tuple[str, ...]:
        """The hook sites installed, in install order."""
        seen = [entry[0] for entry in self._swaps] + [entry[0] for entry in self._hooks]
        return tuple(dict.fromkeys(seen))

    def off(self, kinds: frozenset[str] | None = None) -> None:
        """Restore the originals and remove the hooks (of ``kinds``, or all)."""
        for kind, owner, name, original, replacement in reversed(self._swaps):
            if (kinds is None or kind in kinds) and getattr(owner, name) is replacement:
                setattr(owner, name, original)
        for entry in self._hooks:
            if (kinds is None or entry[0] in kinds) and entry[3] is not None:
                entry[3].remove()
                entry[3] = None

    def on(self, kinds: frozenset[str] | None = None) -> None:
        """Put back what ``off`` took out (of ``kinds``, or all)."""
        for kind, owner, name, original, replacement in self._swaps:
            if (kinds is None or kind in kinds) and getattr(owner, name) is original:
                setattr(owner, name, replacement)
        for entry in self._hooks:
            if (kinds is None or entry[0] in kinds) and entry[3] is None:
                entry[3] = entry[1](entry[2])
