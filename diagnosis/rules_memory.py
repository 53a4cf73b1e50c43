"""Host memory as the limit, now or soon (``host_memory``): a job's cgroup or the host's RAM.

A job runs out of host memory in one of two places: its memory cgroup's limit (a container's,
a Slurm allocation's), where the OOM killer acts inside the group whatever the host has free,
or the host's RAM.  Before the OOM killer ends it the kernel works harder and harder to find
pages: it reclaims the page cache and, with swap, swaps out; the job's tasks then stall on
memory (PSI ``memory``), and a loader that faults its samples back in from swap waits.  So the
rule holds when:

* **the limit will be reached soon**: the anonymous memory's growth over the last minute (the
  collector's least-squares slope) reaches the limit within ``SOON_S``; within ``URGENT_S``
  the run itself is at stake and the finding claims all of its time, as a hang does;
* **memory is the limit now**: its tasks stalled on memory ``PSI_SOME`` of the time (the
  cgroup's own PSI under v2, else the host's), or the host swaps while the loader waits.

What grows is named from each process's unique memory (USS), read while memory is a concern:
DataLoader workers whose own memory grows together are copying the dataset's pages (copy on
read of Python objects), and the remedies say so first.
"""

from __future__ import annotations

from dataclasses import dataclass

from traintop.collectors.memory_state import CgroupMemory, PressureSet, UniqueMemory, time_left_s
from traintop.diagnosis import remedies_host
from traintop.diagnosis.context import Context
from traintop.diagnosis.findings import candidate
from traintop.diagnosis.gains import unmodelled
from traintop.diagnosis.host_view import psi_evidence
from traintop.diagnosis.model import Candidate, Evidence
from traintop.diagnosis.remedies import MEMORY
from traintop.diagnosis.signals import DATA_WAIT_SHARE, data_wait
from traintop.diagnosis.text import duration, pct, rate, size

URGENT_S = 600.0  # the limit reached within 10 min at the current growth: the run is at stake
SOON_S = 3600.0  # ... within an hour: a warning ranked above healthy compute
SOON_RANK = 0.02  # as the GPU's near-OOM: above healthy compute, below any measured loss
GROWTH_MIN_PER_S = 1e-5  # of the limit per second (0.06 %/min): less is a plateau's noise
PSI_SOME = 0.10  # tasks stalled on memory a tenth of the time: reclaim is costing the job
PSI_FULL = 0.05  # every task stalled this share: no progress at all (what oomd acts on)
SWAP_IN_BYTES_PER_S = 1 << 20
SWAP_LOST = 0.5  # swapping without a loader that waits on it: everything slows, as before
COPIES_SHARE = 0.5  # workers whose own memory makes this share of the growth: their copies


@dataclass(frozen=True, slots=True)
class Limit:
    """The memory that runs out first: the rank's cgroup or the host's RAM."""

    where: str  # "cgroup" or "host"
    limit_bytes: int
    used_bytes: int
    growth_bytes_per_s: float | None
    cgroup: CgroupMemory | None = None

    @property
    def left_s(self) -> float | None:
        if self.growth_bytes_per_s is None:
            return None
        if self.growth_bytes_per_s < GROWTH_MIN_PER_S * self.limit_bytes:
            return None
        return time_left_s(max(0, self.limit_bytes - self.used_bytes), self.growth_bytes_per_s)


def limits(ctx: Context) -> list[Limit]:
    """The rank's cgroup limit and the host's RAM, whichever are known."""
    found: list[Limit] = []
    cgroup = _cgroup(ctx)
    if cgroup is not None and cgroup.limit_bytes and cgroup.anon_bytes is not None:
        found.append(Limit("cgroup", cgroup.limit_bytes, cgroup.anon_bytes,
                           cgroup.growth_bytes_per_s, cgroup))  # fmt: skip
    host = ctx.box.host
    if host is not None and host.total_bytes > 0:
        trend = host.available_trend_bytes_per_s
        growth = -trend if trend is not None else None
        found.append(Limit("host", host.total_bytes, host.total_bytes - host.available_bytes,
                           growth))  # fmt: skip
    return found


def first_out(ctx: Context) -> Limit | None:
    """The limit reached first at the current growth (None: neither is being approached).
    The host's RAM counts only while the job's own processes make most of its growth: on a
    shared box another process's climb is no bottleneck of this job's."""
    timed = [lim for lim in limits(ctx) if lim.left_s is not None]
    timed = [lim for lim in timed if lim.where != "host" or _own_growth(ctx, lim)]
    return min(timed, key=lambda lim: lim.left_s or 0.0) if timed else None


def _own_growth(ctx: Context, lim: Limit) -> bool:
    """Whether the job's processes' own memory grows by ``COPIES_SHARE`` of ``lim``'s growth."""
    pid = ctx.job.job.pid if ctx.job else None
    own = 0.0
    for proc in _processes(ctx):
        growth = growth_of(proc) if proc.pid != pid else proc.growth_bytes_per_s
        own += max(0.0, growth or 0.0)
    return own > 0 and own >= COPIES_SHARE * (lim.growth_bytes_per_s or 0.0)


def _cgroup(ctx: Context) -> CgroupMemory | None:
    memory = ctx.job.job.memory if ctx.job else None
    return memory.cgroup if memory is not None else None


def _processes(ctx: Context) -> tuple[UniqueMemory, ...]:
    memory = ctx.job.job.memory if ctx.job else None
    return memory.processes if memory is not None else ()


def _limit_text(lim: Limit) -> str:
    """``the job's cgroup (/train) holds 7.6 GiB of its 8.0 GiB limit``, ``the host has ...``."""
    if lim.where == "cgroup" and lim.cgroup is not None:
        return (f"the job's cgroup ({lim.cgroup.cgroup}) holds {size(lim.used_bytes)} of its "
                f"{size(lim.limit_bytes)} limit")  # fmt: skip
    free = lim.limit_bytes - lim.used_bytes
    return f"the host has {size(free)} of {size(lim.limit_bytes)} available"


def _runs_out(lim: Limit) -> Evidence:
    """``at +180 MB/min, the cgroup's 8.0 GiB limit is reached in about 6m00s``."""
    growth = lim.growth_bytes_per_s or 0.0
    what = f"the cgroup's {size(lim.limit_bytes)} limit" if lim.where == "cgroup" else (
        f"the host's {size(lim.limit_bytes)} of RAM")  # fmt: skip
    text = (f"{_limit_text(lim)}; at +{rate(growth * 60).removesuffix('/s')}/min, {what} is "
            f"reached in about {duration(lim.left_s)}")  # fmt: skip
    return Evidence(text, "memory_left_s", lim.left_s, "memory")


def _copies(ctx: Context) -> tuple[Evidence, ...]:
    """Who grows: the DataLoader workers' own memory (USS), against the rank's."""
    procs = _processes(ctx)
    if not procs:
        return ()
    pid = ctx.job.job.pid if ctx.job else None
    workers = [p for p in procs if p.pid != pid]
    own = next((p for p in procs if p.pid == pid), None)
    facts: list[Evidence] = []
    if workers:
        facts.append(_workers_fact(workers))
    if own is not None:
        text = f"the trainer's own memory (USS) {size(own.uss_bytes)}"
        text += _growth_words(own.growth_bytes_per_s)
        facts.append(Evidence(text, "trainer_uss_bytes", float(own.uss_bytes), "memory"))
    return tuple(facts)


def growth_of(proc: UniqueMemory) -> float | None:
    """A process's USS growth: its trend, else (a forked worker, which began owning next to
    nothing) its USS over its age."""
    if proc.growth_bytes_per_s is not None:
        return proc.growth_bytes_per_s
    age = proc.process_age_s
    return proc.uss_bytes / age if age is not None and age >= 1.0 else None


def _workers_fact(workers: list[UniqueMemory]) -> Evidence:
    uss = [w.uss_bytes for w in workers]
    growth = sum(growth_of(w) or 0.0 for w in workers)
    each = size(min(uss)) if min(uss) == max(uss) else f"{size(min(uss))}-{size(max(uss))}"
    text = f"{len(workers)} DataLoader workers' own memory (USS) {each} each"
    if growth > 0:
        text += f", growing +{rate(growth * 60).removesuffix('/s')}/min together"
    return Evidence(text, "workers_uss_growth_bytes_per_s", growth, "dataloader")


def _growth_words(growth: float | None) -> str:
    if growth is None or growth <= 0:
        return ""
    return f", growing +{rate(growth * 60).removesuffix('/s')}/min"


def copies_grow(ctx: Context, lim: Limit | None) -> bool:
    """Whether the workers' own memory makes most of the growth: each copies the pages it
    reads (Python objects' reference counts: copy on read)."""
    workers = [p for p in _processes(ctx) if ctx.job is None or p.pid != ctx.job.job.pid]
    grown = sum(max(0.0, growth_of(w) or 0.0) for w in workers)
    total = lim.growth_bytes_per_s if lim is not None else None
    return grown > 0 and (not total or grown >= COPIES_SHARE * total)


def _pressure(ctx: Context) -> tuple[float, tuple[Evidence, ...]]:
    """Tasks stalled on memory (PSI) a large share of the time: reclaim, swap-in, thrashing;
    the job's own cgroup's (v2: its group's, else its memory cgroup's) or the host's."""
    own = ctx.job.job.pressure if ctx.job else None
    cgroup = _cgroup(ctx)
    if (own is None or own.memory is None) and cgroup is not None and cgroup.pressure:
        own = PressureSet(None, cgroup.pressure, None)
    facts = psi_evidence(own, ctx.box.host, "memory")
    share = facts[0].value if facts else None
    return (share or 0.0, facts) if share is not None and share >= PSI_SOME else (0.0, ())


def _swapping(ctx: Context) -> tuple[float, tuple[Evidence, ...]]:
    """Swap-in against the loader's wait: a loader that waits while pages come back from swap
    waits on the disk the swap lives on."""
    host = ctx.box.host
    swap_in = host.swap_in_bytes_per_s if host is not None else None
    total = ctx.box.swap_bytes_per_s
    if total is None or total < SWAP_IN_BYTES_PER_S:
        return 0.0, ()
    facts = [Evidence(f"host swapping {rate(total)}", "swap_bytes_per_s", total, "memory")]
    wait = data_wait(ctx) or 0.0
    if swap_in and swap_in >= SWAP_IN_BYTES_PER_S and wait >= DATA_WAIT_SHARE:
        text = f"swap-in {rate(swap_in)} while the loader waits {pct(wait)} of the time"
        facts.append(Evidence(text, "swap_in_bytes_per_s", swap_in, "memory"))
        return max(wait, SWAP_LOST), tuple(facts)
    return SWAP_LOST, tuple(facts)


def _limit_hits(lim: Limit | None) -> tuple[Evidence, ...]:
    cgroup = lim.cgroup if lim is not None else None
    if cgroup is None or not cgroup.limit_hits:
        return ()
    what = "memory.failcnt" if cgroup.version == 1 else "memory.events max"
    text = f"the cgroup met its limit {cgroup.limit_hits:,} times ({what}): the kernel reclaims"
    return (Evidence(text, "memory_limit_hits", float(cgroup.limit_hits), "memory"),)


def host_memory(ctx: Context) -> Candidate | None:
    """The job's memory runs out soon (its cgroup's limit or the host's RAM, at the current
    growth), or is the limit now (tasks stalled on memory, swap-in the loader waits on)."""
    lim = first_out(ctx)
    left = lim.left_s if lim is not None else None
    soon = lim is not None and left is not None and left <= SOON_S
    stalled, psi = _pressure(ctx)
    swapped, swap = _swapping(ctx)
    if not soon and not psi and not swap:
        return None
    urgent = soon and left is not None and left <= URGENT_S
    lost = max(1.0 if urgent else SOON_RANK if soon else 0.0, stalled, swapped)
    facts = ((_runs_out(lim),) if soon and lim is not None else ()) + psi + swap
    facts += _copies(ctx) + (_limit_hits(lim) if soon else ())
    full = ctx.box.host.memory.full if ctx.box.host and ctx.box.host.memory else None
    return candidate(
        ctx,
        "host_memory",
        severity="error" if urgent or swap or (full or 0.0) >= PSI_FULL else "warning",
        summary=_summary(lim if soon else None, stalled, swapped),
        evidence=facts,
        remedies=lambda: unmodelled(
            remedies_host.host_memory(
                ctx, (lim.where, lim.limit_bytes) if lim else None, copies_grow(ctx, lim)
            ),
            MEMORY,
        ),
        lost=lost,
        explained=max(stalled, swapped, 1.0 if soon else 0.0),
    )


def _summary(lim: Limit | None, stalled: float, swapped: float) -> str:
    if lim is not None:
        where = "its cgroup's memory limit" if lim.where == "cgroup" else "the host's memory"
        return f"Out of memory in about {duration(lim.left_s)}: {where} at the current growth"
    if swapped:
        return "Host is swapping: memory is the limit"
    return f"Memory is the limit: tasks stalled on memory {pct(stalled)} of the time"
