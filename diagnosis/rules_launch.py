"""The GPU idles inside the steps while input is on time: launch-bound, or drained by syncs.

Both are judged on the card's own busy share (:mod:`traintop.diagnosis.busy`), never on the
CUDA-event span, and split by :mod:`traintop.diagnosis.gpu_idle`: the profile's HTA split where a
step was profiled, else the sync hook's counts and what the training thread does.
"""

from __future__ import annotations

from traintop.diagnosis import remedies
from traintop.diagnosis.applied import facts_seen
from traintop.diagnosis.busy import (
    GAP_MIN,
    Busy,
    busy_evidence,
    gpu_busy,
    gpu_gaps,
    gpu_lost_share,
    queued_evidence,
)
from traintop.diagnosis.context import Context, once
from traintop.diagnosis.findings import candidate
from traintop.diagnosis.gpu_idle import (
    IdleSplit,
    idle_split,
    launch_text,
    profile_text,
    site_name,
    sites,
    times,
)
from traintop.diagnosis.job_cpus import throttled
from traintop.diagnosis.model import Candidate, Evidence
from traintop.diagnosis.signals import (
    COMM_SHARE,
    DATA_WAIT_SHARE,
    TRAINER_PEGGED_PCT,
    comm_share,
    cpu_saturated,
    data_wait,
    io_bound,
    trainer_pegged,
)
from traintop.diagnosis.text import pct, pct100

HOST_LAUNCHING_PCT = 80.0  # the training thread runs this much while the GPU idles in the step
SYNC_MEASURED = 0.1  # a profiled sync share worth a finding: a one-line fix
SYNC_GUESSED = 0.3  # without the sync hook's counts: idle and a sleeping trainer, a guess
UNSEEN_CPU = 0.7  # a sync stall told from a thread that also launches, or unmeasured
HOST_KNOBS = ("autocast", "compile", "cuda_graphs", "fused_optimizer")


def _input_ok(ctx: Context) -> bool:
    wait = data_wait(ctx)
    return wait is None or wait < DATA_WAIT_SHARE


def launching(ctx: Context, busy: Busy | None) -> tuple[Evidence, ...]:
    """The training thread keeps a CPU busy while the GPU idles: pegged (running or queued
    ≥ 90 % of the time), or, where the event span shows the gaps fall inside the step, running
    ≥ 80 %: a thread that sleeps at most a fifth of the time cannot be waiting out gaps that
    large."""
    pegged = trainer_pegged(ctx)
    t = ctx.trainer
    if pegged or busy is None or t is None or busy.queued is None:
        return pegged
    if busy.queued - busy.share < GAP_MIN:
        return ()
    run = t.cpu_pct if t.main_cpu_pct is None else t.main_cpu_pct + (t.main_wait_pct or 0.0)
    if run is None or run < HOST_LAUNCHING_PCT:
        return ()
    text = (
        f"trainer {t.name} (pid {t.pid}) main thread at {pct100(run)} CPU: launching, not waiting"
    )
    return (Evidence(text, "trainer_cpu_pct", run, "processes"),)


def _thread_cpu(ctx: Context) -> tuple[Evidence, ...]:
    """The training thread's CPU where it is measured, pegged or not."""
    t = ctx.trainer
    if t is None or t.main_cpu_pct is None:
        return ()
    run = t.main_cpu_pct + (t.main_wait_pct or 0.0)
    text = f"trainer {t.name} (pid {t.pid}) main thread at {pct100(run)} CPU"
    return (Evidence(text, "trainer_cpu_pct", run, "processes"),)


def _profile_facts(split: IdleSplit) -> tuple[Evidence, ...]:
    p = split.profile
    if p is None:
        return ()
    facts = [Evidence(profile_text(p), "gpu_profile_host_wait_share", p.host_wait_share, "gpu")]
    launches = launch_text(p)
    if launches:
        facts.append(Evidence(launches, "gpu_profile_kernels", float(p.kernels), "gpu"))
    return tuple(facts)


def _idle(ctx: Context) -> tuple[Busy | None, tuple[Evidence, ...], IdleSplit | None]:
    """The busy share, the training thread's evidence of launching, and the idle time's split:
    what both rules read, made once per rank."""
    busy = gpu_busy(ctx)
    thread = launching(ctx, busy)
    return busy, thread, idle_split(ctx, bool(thread))


def host_overhead(ctx: Context) -> Candidate | None:
    """The GPU waits on the host's next launch: the profile's host wait where a step was
    profiled, else the card idle while the training thread runs all the time."""
    if not _input_ok(ctx):
        return None
    if ctx.mode == "system":
        return _system_host(ctx)
    busy, thread, split = once(ctx, "idle", _idle)
    if busy is None or split is None or split.host < GAP_MIN:
        return None
    facts = (
        busy_evidence(busy, only=True),
        *queued_evidence(busy),
        *_profile_facts(split),
        *(thread or _thread_cpu(ctx)),
        *throttled(ctx),
        *facts_seen(ctx, HOST_KNOBS),
    )
    return candidate(
        ctx,
        "host_overhead",
        severity="warning",
        summary=f"Launch-bound: the GPU waits {pct(split.host)} of the time for the host's kernels",
        evidence=facts,
        remedies=remedies.host_overhead(ctx, split.host),
        lost=split.host,
    )


def _system_host(ctx: Context) -> Candidate | None:
    """No job attached: a GPU with gaps beside one pegged core, nothing else saturated."""
    gaps, pegged = gpu_gaps(ctx), trainer_pegged(ctx)
    if not gaps or not pegged or cpu_saturated(ctx) or io_bound(ctx):
        return None
    lost = gpu_lost_share(ctx)
    return candidate(
        ctx,
        "host_overhead",
        severity="warning",
        summary=f"Trainer CPU-bound between GPU work: GPU idle {pct(lost)}",
        evidence=gaps + pegged,
        remedies=remedies.host_overhead(ctx, lost),
        lost=lost,
    )


def _dominant_phase(ctx: Context) -> tuple[Evidence, ...]:
    phases = [p for p in ctx.job.job.phases if p.name != "data"] if ctx.job else []
    if not phases:
        return ()
    top = max(phases, key=lambda p: p.share)
    text = f"most of the step in phase '{top.name}' ({pct(top.share)}, {top.mean_s * 1000:.0f} ms)"
    return (Evidence(text, f"phase.{top.name}.share", top.share, "training"),)


def _site_facts(ctx: Context, split: IdleSplit) -> tuple[Evidence, ...]:
    """``train.py:123 `loss.item()` ×4 a step; the GPU idles 23 % of the time after it``, then
    the next lines that sync."""
    found = sites(ctx)
    if not found:
        return ()
    top = found[0]
    after = "them" if len(found) > 1 else "it"
    text = f"{site_name(top)} {times(top.per_step)} a step; the GPU idles {pct(split.sync)}"
    facts = [
        Evidence(f"{text} of the time after {after}", "syncs_per_step", top.per_step, "training")
    ]
    for site in found[1:3]:
        line = f"also {site_name(site)} {times(site.per_step)} a step"
        facts.append(Evidence(line, "syncs_per_step", site.per_step, "training"))
    return tuple(facts)


def _sync_bar(split: IdleSplit, named: bool) -> float:
    """What a sync stall must explain: a profiled sync share is measured (a tenth of the time
    for a one-line fix), named lines with the card's gap are the data rules' fifth, and a gap
    beside a sleeping trainer, with no sync seen, is a guess (the old bar)."""
    if split.profile is not None:
        return SYNC_MEASURED
    return GAP_MIN if named else SYNC_GUESSED


def sync_stall(ctx: Context) -> Candidate | None:
    """Host and GPU take turns waiting for each other (``.item()``, ``.cpu()``, sync calls):
    the GPU idles after the host's syncs although input is on time."""
    if ctx.mode != "attach" or not ctx.gpus or not _input_ok(ctx):
        return None
    comm = comm_share(ctx)
    if comm is not None and comm[0] >= COMM_SHARE:
        return None  # waiting on collectives is the network rule's case
    busy, thread, split = once(ctx, "idle", _idle)
    named = bool(sites(ctx))
    if busy is None or split is None or split.sync < _sync_bar(split, named):
        return None
    head = _site_facts(ctx, split)
    facts = (*head, busy_evidence(busy, only=True), *_profile_facts(split), *_waiting(ctx))
    return candidate(
        ctx,
        "sync_stall",
        severity="warning",
        summary=_sync_summary(split, head),
        evidence=(*facts, *_dominant_phase(ctx), *facts_seen(ctx, ("pin_memory",))),
        remedies=remedies.sync_stall(
            ctx, site_name(sites(ctx)[0]) if named else None, split.sync, launching=bool(thread)
        ),
        lost=split.sync,
        certainty=_sync_certainty(ctx, split, bool(thread)),
    )


def _sync_summary(split: IdleSplit, head: tuple[Evidence, ...]) -> str:
    if not head:
        return f"Host-GPU synchronisation stalls: GPU idle {pct(split.sync)}"
    where = head[0].text.split(";")[0]
    return f"Sync stalls idle the GPU {pct(split.sync)} of the time: {where}"


def _waiting(ctx: Context) -> tuple[Evidence, ...]:
    cpu = ctx.trainer.cpu_pct if ctx.trainer else None
    if cpu is None:
        return ()
    text = f"trainer at {pct100(cpu)} CPU: waiting, not computing"
    if cpu >= TRAINER_PEGGED_PCT * 0.8:
        text = f"trainer at {pct100(cpu)} CPU (CUDA spins while it waits for the GPU)"
    return (Evidence(text, "trainer_cpu_pct", cpu, "processes"),)


def _sync_certainty(ctx: Context, split: IdleSplit, thread: bool) -> float:
    """Measured (a profile), or named lines beside a thread that waits: sure.  Lines beside a
    thread that also runs all the time could be launch-bound as well; a guess without lines
    is sure only where the trainer is measured waiting."""
    if split.profile is not None or (sites(ctx) and not thread):
        return 1.0
    cpu = ctx.trainer.cpu_pct if ctx.trainer else None
    waiting = not sites(ctx) and cpu is not None and cpu < TRAINER_PEGGED_PCT * 0.8
    return 1.0 if waiting else UNSEEN_CPU
