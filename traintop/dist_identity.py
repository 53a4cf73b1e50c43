"""Who this process is in its job: rank, local rank, world size and the rendezvous they share.

Launchers disagree about the environment they leave: torchrun exports RANK / LOCAL_RANK /
WORLD_SIZE, Lightning's launcher exports LOCAL_RANK and WORLD_SIZE but no RANK, ``mp.spawn``
exports nothing and passes the rank as an argument.  What every one of them ends in is
``torch.distributed.init_process_group``, so its result (``get_rank()``,
``get_world_size()``) overrides the environment's guess, and the ring header is rewritten when
the group comes after the segment was made.

The rendezvous goes into the header's ``run_id`` so the monitor folds the ranks of one job
together (``collectors/job_key.py``): the launcher's run id when it set one, else the address
every rank connected to (the ``init_method`` URL without its per-rank query, or the store's
``tcp://host:port``, or ``MASTER_ADDR:MASTER_PORT``).  Stdlib only: torch is only ever passed in.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from traintop.ring import env_run_id


@dataclass(frozen=True, slots=True)
class Identity:
    """A process's place in its job, as written into the ring header."""

    rank: int
    local_rank: int
    world_size: int
    run_id: str


_from_group: Identity | None = None  # set once a process group exists in this process


def current() -> Identity:
    """The process group's identity if one exists (however it was made), else the environment's."""
    if _from_group is not None:
        return _from_group
    dist = sys.modules.get("torch.distributed")  # never import torch from here
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return from_group(dist, None, None)
    except Exception:  # a half-initialised torch.distributed: fall back to the environment
        pass
    return from_env()


def from_env() -> Identity:
    """torchrun's variables; a missing RANK with LOCAL_RANK set (Lightning) is one host's rank."""
    local = _env_int("LOCAL_RANK", 0)
    return Identity(_env_int("RANK", local), local, max(1, _env_int("WORLD_SIZE", 1)),
                    env_run_id())  # fmt: skip


def from_group(dist: Any, init_method: str | None, store: Any) -> Identity:
    """Identity of the default process group just created (``dist`` is torch.distributed)."""
    rank, world = int(dist.get_rank()), int(dist.get_world_size())
    return Identity(rank, local_rank(rank), world, rendezvous(init_method, store))


def remember(identity: Identity) -> None:
    """Make ``identity`` this process's from now on (the hook calls this after the group)."""
    global _from_group
    _from_group = identity


def local_rank(rank: int) -> int:
    """LOCAL_RANK when a launcher set it, else ``mp.spawn``'s process index, else the rank."""
    if "LOCAL_RANK" in os.environ:
        return _env_int("LOCAL_RANK", 0)
    if "LOCAL_WORLD_SIZE" in os.environ:
        return rank % max(1, _env_int("LOCAL_WORLD_SIZE", 1))
    index = spawn_index()
    return rank if index is None else index


def spawn_index() -> int | None:
    """The index ``torch.multiprocessing.spawn`` gave this process: ``i`` in its ``_wrap`` frame.

    ``mp.spawn(fn, nprocs=n)`` calls ``fn(i, ...)`` from ``_wrap(fn, i, args, error_file)``;
    that frame is on the stack whenever the group is created inside ``fn``.
    """
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_wrap" and frame.f_globals.get("__name__", "").endswith(".spawn"):
            index = frame.f_locals.get("i")
            return index if isinstance(index, int) else None
        frame = frame.f_back
    return None


def rendezvous(init_method: str | None, store: Any) -> str:
    """What all ranks of this job share: the run id, else the address they all connected to."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id not in ("", "none"):
        return run_id
    if init_method and not init_method.startswith("env://"):
        return init_method.split("?", 1)[0]  # tcp://h:p?rank=1&world_size=2: rank differs
    host, port = getattr(store, "host", None), getattr(store, "port", None)
    if host and port:
        return f"tcp://{host}:{port}"
    return env_run_id()


def _env_int(variable: str, default: int) -> int:
    try:
        return int(os.environ.get(variable, default))
    except ValueError:
        return default
