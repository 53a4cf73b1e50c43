"""What ``unknown`` says about a live job: where its steps go, and what was measured and ruled out.

"No rule matched" is neither a verdict nor a reason anyone can act on.  When no rule holds the
engine still knows where the step time goes (the phases) and whether the trainer computes or
waits (its CPU: a process at 30 % CPU spends at least 70 % of the time off CPU), and it has
measured every resource a rule would have blamed.  Saying both, with the numbers, tells the
user what is *not* the problem and where to look next (the dominant phase, and what it waits
on: a device, peers, a lock, a sleep).
"""

from __future__ import annotations

from traintop.diagnosis.context import Context
from traintop.diagnosis.model import Evidence, Finding
from traintop.diagnosis.signals import DATA_WAIT_SHARE, comm_share, data_wait, read_traffic
from traintop.diagnosis.text import pct, pct100, rate, seconds
from traintop.diagnosis.where import how_to_look, where_time_goes


def explain(ctx: Context) -> Finding:
    """The ``unknown`` finding for a window no rule explains, with its measured numbers."""
    first = [e for e in (_stalled(ctx),) if e is not None] + list(where_time_goes(ctx))
    ruled = ruled_out(ctx)
    head = first[0].text if first else "no step timing"
    summary = f"no bottleneck found: {head}; ruled out " + ", ".join(e.text for e in ruled)
    return Finding(
        bottleneck="unknown",
        confidence=0.0,
        severity="info",
        summary=summary,
        evidence=(*first, *ruled),
        remedies=how_to_look(ctx),
    )


def _stalled(ctx: Context) -> Evidence | None:
    """A hung job's window means describe the time before it hung: say that it stopped, and
    in which phase (a collective waiting for a dead peer, a dataloader that deadlocked)."""
    job = ctx.job.job if ctx.job else None
    if job is None or job.state != "stalled":
        return None
    age = job.last_step_age_s
    text = "stalled: " + (f"no step for {seconds(age)}" if age is not None else "no recent step")
    if job.live_phase and job.live_phase_s is not None:
        text += f", in {job.live_phase} for {seconds(job.live_phase_s)}"
    return Evidence(text, "last_step_age_s", age, "training")


def ruled_out(ctx: Context) -> tuple[Evidence, ...]:
    """One measured fact per resource a rule would blame: data wait, CPU, storage, network, GPU."""
    found = [_data(ctx), _cpu(ctx), _storage(ctx), _network(ctx), _gpu(ctx)]
    return tuple(e for e in found if e is not None)


def _data(ctx: Context) -> Evidence | None:
    wait = data_wait(ctx)
    if wait is None:
        return None
    text = f"data wait {pct(wait)} (< {pct(DATA_WAIT_SHARE)})"
    return Evidence(text, "data_wait_share", wait, "training")


def _cpu(ctx: Context) -> Evidence | None:
    busy = ctx.box.cpu_busy_pct
    if busy is None:
        return None
    text = f"CPU {pct100(busy)} busy of {ctx.box.logical_cpus}"
    wait = ctx.trainer.cpu_wait_pct if ctx.trainer else None
    if wait is not None:
        text += f", trainer queued for a CPU {pct100(wait)}"
    return Evidence(text, "cpu_busy_pct", busy, "cpu")


def _storage(ctx: Context) -> Evidence:
    reads = read_traffic(ctx)
    if reads:
        return Evidence(f"storage ({reads[0].text})", reads[0].metric, reads[0].value, "disk")
    own = [p.read_bytes_per_s for p in (ctx.trainer, *ctx.workers) if p is not None]
    total = sum(r for r in own if r is not None)
    return Evidence(f"storage (job reads {rate(total)})", "job_read_bytes_per_s", total, "disk")


def _network(ctx: Context) -> Evidence:
    comm = comm_share(ctx)
    if comm is not None:
        text = f"network (communication {pct(comm[0])} of step)"
        return Evidence(text, "comm_share", comm[0], "network")
    busiest = max(ctx.box.nics, key=lambda n: n.link_util_pct or 0.0, default=None)
    if busiest is None or busiest.link_util_pct is None:
        return Evidence("network (no collective timed)", "comm_share", None, "network")
    text = f"network (no collective timed, {busiest.name} at {pct100(busiest.link_util_pct)})"
    return Evidence(text, f"nic.{busiest.name}.link_util_pct", busiest.link_util_pct, "network")


def _gpu(ctx: Context) -> Evidence:
    util = ctx.gpu_util_pct
    if not ctx.box.has_gpus or util is None:
        return Evidence("GPU (none in use)", "gpu_util_pct", None, "gpu")
    return Evidence(f"GPU ({pct100(util)} utilization)", "gpu_util_pct", util, "gpu")
