"""One run, one job: a token that tells two runs on the same rendezvous endpoint apart.

The ranks of a job are folded by the rendezvous they share (``traintop.dist_identity``): the
launcher's run id, else the store's address.  But torchrun's default run id is ``none`` and on a
shared box nearly everyone keeps ``--master_port 29500``: successive runs share that address,
and an earlier run's rank that is still alive (stopped with SIGSTOP, or slow to die) was
folded into the next run.  What differs between two runs is the store itself: each run's
rendezvous is a fresh one, and every rank of a run talks to the same one.  So rank 0 puts a
random token into it (``traintop/run``) as its process group is made, every other rank reads it
there, and each appends it to its run id: ``tcp://host:29500#1a2b3c4d``.

Rank 0 sets the key (one round trip) on the training thread, right after its process group
exists; every other rank waits for it there.  Rank 0 leaves ``init_process_group`` once every
rank has reached its store, so the wait ends as soon as the slowest rank arrived, which the
first collective would have waited for anyway; it is cut at ``WAIT_S`` (a rank 0 that does not
run traintop: the job then starts that much later, once, and its ranks carry no token).  The
training thread, never a helper thread: the store's client is one socket, and a second thread's
request could interleave with the ones the process group sends through it (gloo's pairs,
NCCL's ids).  Wherever the store cannot be had, the run id is the bare endpoint, as before.
Stdlib only: torch is only ever passed in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import secrets
from collections.abc import Callable
from typing import Any

from traintop import dist_identity
from traintop.ring_format import TEXT_SIZE

KEY = "traintop/run"
WAIT_S = 30.0
TOKEN_HEX = 8


def tagged(run_id: str, token: str) -> str:
    """``run_id#token``, cut so the token always fits the header's field (63 bytes)."""
    room = TEXT_SIZE - 1 - len(token) - 1
    return f"{run_id.encode()[:room].decode(errors='ignore')}#{token}"


def share(dist: Any, identity: dist_identity.Identity,
          adopt: Callable[[dist_identity.Identity], None]) -> None:  # fmt: skip
    """Agree on this run's token through the default group's store and ``adopt`` the identity
    that carries it.  Never raises."""
    if identity.world_size < 2 or not identity.run_id:
        return
    store = _default_store(dist)
    if store is None:
        return
    with contextlib.suppress(Exception):
        if identity.rank == 0:
            token = secrets.token_hex(TOKEN_HEX // 2)
            store.set(KEY, token)
        else:
            store.wait([KEY], datetime.timedelta(seconds=WAIT_S))
            token = store.get(KEY).decode(errors="replace")[:TOKEN_HEX]
        adopt(dataclasses.replace(identity, run_id=tagged(identity.run_id, token)))


def _default_store(dist: Any) -> Any:
    """The default process group's store (torch's private accessor, feature-detected)."""
    c10d = getattr(dist, "distributed_c10d", None)
    get = getattr(c10d, "_get_default_store", None)
    try:
        return get() if get is not None else None
    except Exception:
        return None
