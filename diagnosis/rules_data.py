"""Input-pipeline rules: the job waits for batches, and why (CPU, storage or neither).

Attach mode sees the wait directly (the data phase's share of the time) and splits it by what
the loaders did meanwhile (:mod:`traintop.diagnosis.data_split`), after the trainer's own part
of it, its handoff of each batch: each rule claims its part, so no two claim the same wait
twice and the one that explains the most leads.  System
mode only sees an underused GPU, so it names a data cause only when CPU or storage is visibly
saturated, and otherwise guesses.
"""

from __future__ import annotations

from collections.abc import Callable

from traintop.diagnosis import remedies
from traintop.diagnosis.applied import facts_of, facts_seen
from traintop.diagnosis.bursts import bursts_of
from traintop.diagnosis.busy import gpu_lost_share
from traintop.diagnosis.context import Context
from traintop.diagnosis.data_split import DataSplit, data_split, handoff_own_s
from traintop.diagnosis.findings import candidate
from traintop.diagnosis.host_view import psi_evidence
from traintop.diagnosis.job_cpus import amount, limit_spent, quota_note, throttled, throttling
from traintop.diagnosis.model import Candidate, Evidence, Gain
from traintop.diagnosis.rules_job import pause_wait
from traintop.diagnosis.signals import (
    DATA_WAIT_SHARE,
    WAIT_EVIDENCE_PCT,
    cpu_saturated,
    data_wait,
    data_wait_evidence,
    gpu_underused,
    io_bound,
    loader_cpu_pct,
    nic_busy,
    no_workers,
    read_traffic,
    storage_pressure,
    trainer_pegged,
    wait_held,
    workers_saturated,
)
from traintop.diagnosis.stats import mean_of
from traintop.diagnosis.text import pct, pct100, seconds

DATA_PART_MIN = 0.1  # a part of the wait worth naming beside the largest one (share of time)
SYSTEM_GUESS = 0.5  # system mode sees no wait, only an idle GPU: a data cause is a guess
LOADER_PARTS = (("data_cpu", "on a CPU"), ("data_io", "blocked reading"), ("data_starved", "idle"))
PARTS = (*LOADER_PARTS, ("data_handoff", "handed over"))


def _claim(ctx: Context, name: str) -> tuple[DataSplit, float] | None:
    """The split and this rule's part of it, when the job waits and the part is the largest
    or large enough to name beside it.  The wait inside periodic pauses (an evaluation loading
    its own batches) is the pauses' (``rules_job.pause_wait``): the parts are of the rest."""
    wait = data_wait(ctx) or 0.0
    if wait < DATA_WAIT_SHARE:
        return None  # most ranks: no split to make
    paused = pause_wait(ctx)
    if wait - paused < DATA_WAIT_SHARE:
        return None
    split = data_split(ctx)
    if split is None:
        return None
    kept = 1.0 - paused / split.wait if split.wait > 0 else 1.0
    part = split.part(name) * kept
    largest = max(split.part(other) for other, _ in PARTS) * kept
    if part <= 0.0 or (part < largest and part < DATA_PART_MIN):
        return None
    return split, part


def _wait_line(ctx: Context, split: DataSplit) -> tuple[Evidence, ...]:
    """``data wait 97 % of time, in bursts of 2 batches every 0.48 s: 2 workers × ...``, and
    how the wait divides when more than one cause has a part worth naming."""
    facts = data_wait_evidence(ctx, _bursts(ctx))
    facts += _handoff_line(ctx, split)
    named = [(n, words) for n, words in LOADER_PARTS if split.part(n) >= DATA_PART_MIN]
    if len(named) < 2:
        return facts
    parts = ", ".join(f"{pct(split.part(n))} {words}" for n, words in named)
    text = f"the loaders meanwhile: {parts}"
    return (*facts, Evidence(text, "data_wait_split", split.wait, "dataloader"))


def _handoff_line(ctx: Context, split: DataSplit) -> tuple[Evidence, ...]:
    """``the trainer takes 1.8 ms to take each batch over from its worker, 1.0 ms of it the
    handoff's own work (its unpickling, the worker's threads serving it): 40 % of the time``,
    where that is a part worth naming."""
    per_batch = ctx.job.job.handoff_s if ctx.job is not None else None
    own = handoff_own_s(ctx)
    if per_batch is None or own is None or split.handoff < DATA_PART_MIN:
        return ()
    text = f"the trainer takes {_ms(per_batch)} to take each batch over from its worker, "
    text += f"{_ms(own)} of it the handoff's own work (its unpickling, the worker's threads "
    text += f"serving it): {pct(split.handoff)} of the time"
    shared = facts_of(ctx)
    if shared is not None and shared.sharing_strategy == "file_descriptor":
        text += "; tensors shared by file descriptor, a round trip to the worker each"
    return (Evidence(text, "handoff_s", per_batch, "dataloader"),)


def _bursts(ctx: Context) -> str:
    """How the wait falls across steps, when batches come in bursts (else nothing)."""
    steps = ctx.job.steps if ctx.job else None
    columns = steps.phase_times if steps is not None else None
    names = [p.name for p in ctx.job.job.phases] if ctx.job else []
    if steps is None or columns is None or "data" not in names or len(columns) != len(names):
        return ""
    found = bursts_of(columns[names.index("data")], steps.times, len(ctx.workers))
    return found.text if found is not None else ""


def data_io(ctx: Context) -> Candidate | None:
    """Batches wait on storage: the loaders block on reads while the job reads."""
    if ctx.mode == "system":
        return _system(ctx, "data_io")
    claim = _claim(ctx, "data_io")
    if claim is None:
        return None
    split, part = claim
    facts = (*_wait_line(ctx, split), *_blocked(ctx), *read_traffic(ctx), *storage_pressure(ctx))
    facts += _psi(ctx, "io") + _loader_seen(ctx)
    return candidate(
        ctx,
        "data_io",
        severity="warning",
        summary=f"Input pipeline limited by storage: {pct(part)} of time lost",
        evidence=facts,
        remedies=lambda: remedies.data_io(ctx),
        lost=part,
        steady=wait_held(ctx),
    )


def _blocked(ctx: Context) -> tuple[Evidence, ...]:
    """``2 loading processes blocked reading 93 % of the time (1 % CPU)``."""
    procs = ctx.workers or ((ctx.trainer,) if ctx.trainer is not None else ())
    blocked = mean_of(p.blocked_share for p in procs)
    cpu = loader_cpu_pct(ctx)
    if blocked is None:
        if cpu is None:
            return ()
        text = f"{len(procs)} loading processes at {pct100(cpu)} CPU each while reading"
        return (Evidence(text, "loader_cpu_pct", cpu, "dataloader"),)
    text = f"{len(procs)} loading processes blocked reading {pct(blocked)} of the time"
    text += f" ({pct100(cpu)} CPU each)" if cpu is not None else ""
    return (Evidence(text, "loader_blocked_share", blocked, "dataloader"),)


def data_cpu(ctx: Context) -> Candidate | None:
    """Batches wait on CPU work (decode, augmentation): the loaders run or queue for a CPU."""
    if ctx.mode == "system":
        return _system(ctx, "data_cpu")
    claim = _claim(ctx, "data_cpu")
    if claim is None:
        return None
    split, part = claim
    spare = not cpu_saturated(ctx) and not limit_spent(ctx)
    quota = throttling(ctx)
    cause = f" (the job's cgroup quota of {amount(quota)})" if quota else ""
    return candidate(
        ctx,
        "data_cpu",
        severity="warning",
        summary=f"Input pipeline limited by CPU{cause}: {pct(part)} of time lost",
        evidence=_cpu_evidence(ctx, split),
        remedies=lambda: remedies.data_cpu(ctx, spare),
        lost=part,
        steady=wait_held(ctx),
    )


def _cpu_evidence(ctx: Context, split: DataSplit) -> tuple[Evidence, ...]:
    cpu = (*_cpu_facts(ctx), *throttled(ctx), *_psi(ctx, "cpu"))
    return (*_wait_line(ctx, split), *cpu, *_loader_seen(ctx))


def _psi(ctx: Context, resource: str) -> tuple[Evidence, ...]:
    """The job's (else the host's) stall share on ``resource``, where it explains the wait."""
    return psi_evidence(ctx.job.job.pressure if ctx.job else None, ctx.box.host, resource)


def _loader_seen(ctx: Context) -> tuple[Evidence, ...]:
    """What the job's DataLoader is set to, as its probe saw it."""
    return facts_seen(ctx, ("loader", "pin_memory"))


def _cpu_facts(ctx: Context) -> tuple[Evidence, ...]:
    """The workers' CPU and queueing (saturated or not), the host, or the inline trainer."""
    if not ctx.workers:
        return no_workers(ctx) + trainer_pegged(ctx)
    return (workers_saturated(ctx, quota_note(ctx)) or _worker_facts(ctx)) + cpu_saturated(ctx)


def _ms(seconds_: float) -> str:
    return f"{seconds_ * 1e3:.1f} ms" if seconds_ < 0.01 else seconds(seconds_)


def data_handoff(ctx: Context) -> Candidate | None:
    """Batches are ready, but the trainer spends its wait taking each over from its worker
    (unpickling it, receiving its tensors' shared memory): no count of workers shortens that."""
    if ctx.mode == "system":
        return None  # only the probe times the handoff
    words = "Input pipeline limited by the handoff of each batch: {} of time lost"
    return _waiting(ctx, "data_handoff", words, lambda: remedies.data_handoff(ctx))


def data_starved(ctx: Context) -> Candidate | None:
    """Batches are late although the loaders neither compute nor read most of the time: too
    little parallelism or latency-bound fetches."""
    if ctx.mode == "system":
        return _system(ctx, "data_starved")
    words = "Input pipeline too slow with CPU and disk to spare"
    return _waiting(ctx, "data_starved", words, lambda: remedies.data_starved(ctx))


def _waiting(
    ctx: Context, name: str, words: str, offered: Callable[[], tuple[str | Gain, ...]]
) -> Candidate | None:
    """The finding of a part of the wait the workers' own figures back (``words``: its
    summary, ``{}`` the part)."""
    claim = _claim(ctx, name)
    if claim is None:
        return None
    split, part = claim
    return candidate(
        ctx,
        name,
        severity="warning",
        summary=words.format(pct(part)),
        evidence=(*_wait_line(ctx, split), *_worker_facts(ctx), *_loader_seen(ctx)),
        remedies=offered,
        lost=part,
        steady=wait_held(ctx),
    )


def _worker_facts(ctx: Context) -> tuple[Evidence, ...]:
    """How many workers there are, how much CPU they use, and how long they wait for one."""
    loads = [w.cpu_pct for w in ctx.workers if w.cpu_pct is not None]
    if not loads:
        return ()
    mean = sum(loads) / len(loads)
    text = f"{len(loads)} worker{'s' if len(loads) != 1 else ''} averaging {pct100(mean)} CPU"
    waits = mean_of(w.cpu_wait_pct for w in ctx.workers)
    if waits is not None and waits >= WAIT_EVIDENCE_PCT:
        text += f", waiting for a CPU {pct100(waits)} of the time{quota_note(ctx)}"
    return (Evidence(text, "worker_cpu_pct", mean, "dataloader"),)


# System mode: no wait to split, only an underused GPU; a cause is named when it is visible.


def _system(ctx: Context, name: str) -> Candidate | None:
    """The one data cause system mode can see, if any: storage, CPU, else a guess."""
    starving = gpu_underused(ctx)
    if not starving or _system_cause(ctx) != name:
        return None
    lost = gpu_lost_share(ctx)
    io = io_bound(ctx)
    cpu = () if io else workers_saturated(ctx) + cpu_saturated(ctx)
    facts = starving + (io or cpu)
    return candidate(
        ctx,
        name,
        severity="warning",
        summary=_SYSTEM_SUMMARY[name].format(pct(lost)),
        evidence=facts,
        remedies=lambda: _system_remedies(ctx, name),
        lost=lost,
        certainty=SYSTEM_GUESS if name == "data_starved" else 1.0,
    )


_SYSTEM_SUMMARY = {
    "data_io": "Input pipeline limited by storage: {} of time lost",
    "data_cpu": "Input pipeline limited by CPU: {} of time lost",
    "data_starved": "Input pipeline too slow with CPU and disk to spare (likely; attach the job "
    "to confirm)",
}


def _system_cause(ctx: Context) -> str | None:
    """Storage when it limits reads, CPU when workers or the host are saturated, else a
    starved pipeline unless a pegged trainer or a busy NIC explains the idle GPU better."""
    if io_bound(ctx):
        return "data_io"
    if workers_saturated(ctx) or cpu_saturated(ctx):
        return "data_cpu"
    if trainer_pegged(ctx) or nic_busy(ctx):
        return None
    return "data_starved"


def _system_remedies(ctx: Context, name: str) -> tuple[str | Gain, ...]:
    if name == "data_io":
        return remedies.data_io(ctx)
    if name == "data_cpu":
        return remedies.data_cpu(ctx, not cpu_saturated(ctx) and not limit_spent(ctx))
    return remedies.data_starved(ctx)
