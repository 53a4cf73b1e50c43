"""Which phase names mean waiting on peers: one definition for the panels, the verdict and the
exporter.

The zero-code probe books that wait as ``comm`` (``traintop.comm_hooks.COMM_PHASE``); a script
timing its own phases names it as it likes (``allreduce``, ``nccl``, ``sync_grad``,
``all_gather``, ``barrier``).  A name holding one of the words below is communication; ``sync``
counts only as the whole name, since it is also part of ``async`` and ``cuda_sync``.
"""

from __future__ import annotations

import functools

COMM_WORDS = ("comm", "reduce", "nccl", "gather", "sync_grad", "barrier")
COMM_NAMES = frozenset({"sync"})


@functools.lru_cache(maxsize=1024)
def is_comm_phase(name: str) -> bool:
    """Named like communication: a job has a handful of phase names, asked on every tick."""
    lowered = name.lower()
    return lowered in COMM_NAMES or any(word in lowered for word in COMM_WORDS)
