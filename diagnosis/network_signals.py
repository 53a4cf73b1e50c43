"""Signals of the network rule: time waiting on peers that the network explains, and the
bytes the job moves in its own network namespace.

A rank waits in a collective until the last rank has joined it and the data has crossed, so
its wait measures *every* delay of its peers, not only the wire's.  One delay is no network's
fault and is common on a crowded host: a thread that is runnable but queued for a CPU.  A
rank's main thread queued during its compute reaches the collective late by that queueing, and
every other rank waits for it; once there, the main thread only blocks, and the collective
advances as the backend's threads (gloo's TCP loop and work queue) get a CPU each time bytes
arrive, queueing behind whatever else runs.  The kernel measures both, per thread (``schedstat``
run-queue time; ``ProcView.cpu_wait_pct`` sums a process's threads).  On the 2-core development
VM a 2-rank gloo job on an unshaped loopback waits 13-33 % of its step in ``comm`` while its
main threads queue 9-58 % of the time and its gloo threads another 18-40 % (summed), from a
quiet box to one loaded with CPU hogs; over a 20-100 Mbit/s link it waits 96-99 %, its threads
queued at most 12 % of the time even when loaded (they sleep on the socket).

What explains a rank's wait is its *peers'* lateness, not its own queueing: the rank the CPUs
starve waits little (everyone else is early), while its peer, never queued itself, waits for it
in every step.  So the CPU delay that bounds the skew is the job's slowest rank's: the largest
run-queue share among the job's ranks judged on this box (its own included: its gloo threads
queue inside its own wait).  A rank's wait less that share is what the network can explain,
and a faster network could win back no more.  Ranks on other hosts are not seen: their
queueing, if any, is left to the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from traintop.collectors.snapshot import JobSnapshot
from traintop.diagnosis.context import Box, Context
from traintop.diagnosis.model import Evidence
from traintop.diagnosis.signals import COMM_SHARE, comm_share, held_share
from traintop.diagnosis.text import pct, rate, scaled
from traintop.diagnosis.views import NicView, ProcView, comm_share_of

STARVED_EVIDENCE_SHARE = 0.05  # CPU queueing worth naming beside the communication figure
BACKLOG_BYTES = 16 * 1024  # a rank's connections holding this much unsent: data waits on the link
BACKLOG_SHARE = 0.3  # ... on this share of the window's readings: the link is the limit


@dataclass(frozen=True, slots=True)
class Queued:
    """One rank of a job and the share of the time its threads queued for a CPU."""

    rank: int
    share: float


def comm_on_network(ctx: Context) -> tuple[float, tuple[Evidence, ...]]:
    """Share of the step spent waiting on peers beyond what the job's slowest rank's CPU
    queueing explains, and the evidence when it reaches ``COMM_SHARE`` (else none)."""
    comm = comm_share(ctx)
    if ctx.job is None or comm is None or comm[0] < COMM_SHARE:
        return 0.0, ()  # too little wait to be the network, whatever explains it
    share, names = comm
    late = slowest_rank(ctx.box, ctx.job.job)
    network = max(0.0, share - late.share)
    if network < COMM_SHARE:
        return network, ()
    text = f"communication ({names}) {pct(share)} of step"
    if late.share >= STARVED_EVIDENCE_SHARE:
        text += f", of which rank {late.rank}'s threads queued for a CPU explain up to "
        text += pct(late.share)
    return network, (Evidence(text, "comm_share", share, "training"),)


def link_backlogged(ctx: Context) -> tuple[Evidence, ...]:
    """The link is the limit: the rank's connections held data they could not send on most
    of the window's readings (collectors/job_sockets.py).  A rank waiting for a late peer holds
    nothing: it sent its part, the peer has not written yet."""
    rows = ctx.job.steps.rows if ctx.job else ()
    read = [r.send_queue_bytes for r in rows if r.send_queue_bytes is not None]
    if not read:
        return ()
    full = [q for q in read if q >= BACKLOG_BYTES]
    share = len(full) / len(read)
    if share < BACKLOG_SHARE:
        return ()
    mean = sum(full) / len(full)
    text = (f"its connections held {scaled(mean, 1024, SIZES)} unsent or unacknowledged on "
            f"{pct(share)} of the readings: data waits on the link")  # fmt: skip
    return (Evidence(text, "send_queue_share", share, "network"),)


SIZES = ("B", "KiB", "MiB", "GiB")


def comm_held(ctx: Context) -> float:
    """How steadily the rank waited on its peers: the share of the window's summaries whose
    communication phases reached ``COMM_SHARE`` of the step."""
    rows = ctx.job.steps.rows if ctx.job else ()
    shares = [comm[0] if (comm := comm_share_of(r)) else None for r in rows]
    return held_share(shares, COMM_SHARE)


def slowest_rank(box: Box, job: JobSnapshot) -> Queued:
    """The rank of ``job``'s job, among those judged on ``box``, whose threads queued longest
    for a CPU: the one its peers wait for when the CPUs are short."""
    waits = (Queued(r.rank, cpu_delay(box.procs.get(r.pid))) for r in _job_ranks(box, job))
    return max(waits, key=attrgetter("share"))


def _job_ranks(box: Box, job: JobSnapshot) -> list[JobSnapshot]:
    """The newest summary of every rank of ``job``'s job on ``box`` (``job`` alone without a
    job id: a lone process has no peers)."""
    if not job.job_id:
        return [job]
    latest = (track.rows[-1] for track in box.samples.values() if track.rows)
    return [r for r in latest if r.job_id == job.job_id] or [job]


def cpu_delay(proc: ProcView | None) -> float:
    """Share of the time a rank's threads were runnable but waiting for a CPU, summed over its
    threads and capped at the whole time; 0 when unknown.  Threads queued at the same moment
    count twice, so this bounds from above what queueing can add to the rank's step.  The
    larger of the process's and the main thread's window means: each is measured on the ticks
    the collector chose the process for it (the main thread only among the busiest few)."""
    if proc is None:
        return 0.0
    waits = [w for w in (proc.cpu_wait_pct, proc.main_wait_pct) if w is not None]
    return min(1.0, max(waits, default=0.0) / 100.0)


def cpu_queued_share(ctx: Context) -> float:
    """Share of the time the trainer's main thread was runnable but waiting for a CPU (the
    process's figure when the main thread is not measured alone); 0 when unknown."""
    t = ctx.trainer
    if t is None:
        return 0.0
    wait = t.main_wait_pct if t.main_wait_pct is not None else t.cpu_wait_pct
    return min(1.0, (wait or 0.0) / 100.0)


def job_traffic(ctx: Context) -> tuple[Evidence, ...]:
    """The busiest interface of the job's own network namespace (traintop.collectors.job_nics): the
    bytes its collectives move, where the monitor's own interfaces cannot see them."""
    job_id = ctx.job.job.job_id if ctx.job else ""
    mine = [n for n in ctx.box.nics if job_id and job_id in n.job_ids and _bytes(n) > 0]
    if not mine:
        return ()
    nic = max(mine, key=_bytes)
    text = f"job's network namespace: {nic.name} rx {rate(nic.rx_bytes_per_s or 0)}, "
    text += f"tx {rate(nic.tx_bytes_per_s or 0)}"
    if nic.link_util_pct is not None:
        text += f", {pct(nic.link_util_pct / 100)} of link"
    return (Evidence(text, f"nic.{nic.name}@{nic.job}.bytes_per_s", _bytes(nic), "network"),)


def _bytes(nic: NicView) -> float:
    return (nic.rx_bytes_per_s or 0.0) + (nic.tx_bytes_per_s or 0.0)
