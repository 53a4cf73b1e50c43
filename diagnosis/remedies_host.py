"""Remedies for what holds a job back on its host: memory running out, a thread that holds the
interpreter.  Each fits the cause the evidence shows, with the number that sizes it where one is
measured (one worker's own memory is what fewer workers frees).

The time a remedy would win back is the gains model's to predict (issue 42): memory remedies
here move the OOM, not the step time, and their effect is stated as memory freed; the GIL
remedy's upper bound is the holder's share of the interpreter, quoted in the evidence.
"""

from __future__ import annotations

from traintop.diagnosis.applied import facts_of, offer
from traintop.diagnosis.context import Context
from traintop.diagnosis.model import Gain
from traintop.diagnosis.text import size

ARRAYS = (
    "hold the dataset as one numpy array, an Arrow table or a torch tensor (or in shared "
    "memory) instead of Python objects: each DataLoader worker copies every page of Python "
    "objects it reads (their reference counts are written: copy on read)"
)
NOT_PERSISTENT = (
    "persistent_workers=False: workers forked afresh each epoch share the dataset's pages "
    "again, so their copies last one epoch, not the whole run"
)
MMAP = "memory-map the dataset (np.load(mmap_mode='r'), Arrow/Parquet, LMDB) so workers share it"
SWAP = (
    "stop swapping: fewer/lighter DataLoader workers (each holds a copy of the Dataset)",
    "add RAM or close other jobs on the host",
)


def host_memory(
    ctx: Context, limit: tuple[str, int] | None, copies: bool
) -> tuple[str | Gain, ...]:
    """Workers' copies first (the commonest cause), then fewer workers, then the limit that
    runs out (``limit``: "cgroup" or "host", and its bytes)."""
    found: list[str | Gain] = []
    if copies:
        found += [ARRAYS, *_persistent(ctx)]
    found += [*_fewer_workers(ctx), *_prefetch(ctx)]
    if not copies:
        found.append(MMAP)
    found += _limit(limit)
    if ctx.box.swap_bytes_per_s:
        found += SWAP
    return offer(ctx, found)


def _workers(ctx: Context) -> list:
    memory = ctx.job.job.memory if ctx.job else None
    pid = ctx.job.job.pid if ctx.job else None
    return [p for p in (memory.processes if memory else ()) if p.pid != pid]


def _fewer_workers(ctx: Context) -> tuple[str, ...]:
    """``lower num_workers from 3 to 2: frees about 0.4 GiB (one worker's own memory)``."""
    count = len(ctx.workers)
    if count < 2:
        return ()
    own = [p.uss_bytes for p in _workers(ctx)]
    freed = f": frees about {size(max(own))} (one worker's own memory)" if own else ""
    return (f"lower DataLoader num_workers from {count} to {count - 1}{freed}",)


def _persistent(ctx: Context) -> tuple[str, ...]:
    """Only where the job's workers persist: then their copies accumulate epoch after epoch."""
    facts = facts_of(ctx)
    forked = [lo for lo in facts.loaders if lo.num_workers > 0] if facts else []
    return (NOT_PERSISTENT,) if forked and all(lo.persistent_workers for lo in forked) else ()


def _prefetch(ctx: Context) -> tuple[str, ...]:
    """Each worker holds ``prefetch_factor`` batches in flight."""
    facts = facts_of(ctx)
    loaders = [lo for lo in facts.loaders if lo.prefetch_factor] if facts else []
    if not loaders or not ctx.workers or (loaders[0].prefetch_factor or 0) <= 1:
        return ()
    now = loaders[0].prefetch_factor
    return (f"lower prefetch_factor from {now} to 1: {len(ctx.workers)} workers hold "
            f"{now} batches each in flight",)  # fmt: skip


def _limit(limit: tuple[str, int] | None) -> tuple[str, ...]:
    if limit is None:
        return ()
    if limit[0] == "cgroup":
        return (f"raise the job's memory limit (its cgroup's is {size(limit[1])}): "
                "docker --memory, Kubernetes resources.limits.memory, Slurm --mem",)  # fmt: skip
    return ("add RAM or stop other processes on the host",)


def gil_holder(name: str, cpu_pct: float) -> tuple[str, ...]:
    """Take the thread's Python off the training process's interpreter, or run it less."""
    return (
        f"move what thread '{name}' does to a separate process (multiprocessing, a "
        f"subprocess, a metrics service): it holds the GIL {cpu_pct:.0f} % of the time",
        f"do thread '{name}''s work less often (every N steps) or in bulk",
        "do it in C code that releases the GIL (NumPy/torch operations on whole arrays "
        "instead of Python loops)",
        "on Python 3.13+, a free-threaded build (python3.13t) runs threads without a GIL",
    )
