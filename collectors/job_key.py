"""Which ranks belong to one job: the key that folds a job's per-rank segments together.

A multi-rank job has no single process to name it, but all its ranks share a rendezvous: the
launcher's run id (torchrun's ``--rdzv-id``, in ``TORCHELASTIC_RUN_ID``) or, where that is the
default ``none``, the store address every rank connects to (``MASTER_ADDR:MASTER_PORT``, or the
``init_method`` the probe sees at ``init_process_group``), with the token its ranks agreed on
through their store once the process group exists (traintop/run_token.py): two runs in a row on
one address, even with an earlier run's rank still alive, have two keys.  The probe writes that
into the ring header's ``run_id``.  The world size is part of the key because a restarted job
may rendezvous on the same address with another size.  A single process, or one whose
rendezvous is unknown, is a job of its own, keyed by host and pid.
"""

from __future__ import annotations

from typing import Protocol

NO_RUN_IDS = frozenset({"", "none"})


class _Header(Protocol):
    """What the key reads of a segment header: read-only, as the frozen header is."""

    @property
    def run_id(self) -> str: ...
    @property
    def world_size(self) -> int: ...
    @property
    def hostname(self) -> str: ...
    @property
    def pid(self) -> int: ...
    @property
    def created_monotonic_ns(self) -> int: ...


def job_key(header: _Header) -> str:
    """Stable grouping key: ``run:<run id>/<world size>`` or ``pid:<host>/<pid>/<created ns>``."""
    if header.world_size > 1 and header.run_id not in NO_RUN_IDS:
        return f"run:{header.run_id}/{header.world_size}"
    return f"pid:{header.hostname}/{header.pid}/{header.created_monotonic_ns}"
