"""Signals of the network rule: time waiting on peers that the network explains, and the
bytes the job moves in its own network namespace.

A rank waits in a collective until the slowest peer has sent its share, so the wait measures
*every* delay of the peers, not only the wire's.  One delay is no network's fault and is common
on a crowded host: a peer that is runnable but queued for a CPU reaches the collective late by
exactly that queueing, and every other rank waits for it.  The kernel measures it
(``schedstat`` run-queue time, ``ProcView.main_wait_pct``); ranks of one job on one host share
the CPUs, so a rank's own queueing stands for its peers'.  The share of the step that the
network explains is the wait less that queueing; a faster network could win back only that.
"""

from __future__ import annotations

from diagnosis.context import Context
from diagnosis.model import Evidence
from diagnosis.signals import COMM_SHARE, comm_share
from diagnosis.text import pct, rate
from diagnosis.views import NicView

STARVED_EVIDENCE_SHARE = 0.05  # CPU queueing worth naming beside the communication figure


def comm_on_network(ctx: Context) -> tuple[float, tuple[Evidence, ...]]:
    """Share of the step spent waiting on peers beyond what CPU queueing explains, and the
    evidence when it reaches ``COMM_SHARE`` (else no evidence)."""
    comm = comm_share(ctx)
    if comm is None:
        return 0.0, ()
    share, names = comm
    starved = cpu_queued_share(ctx)
    network = max(0.0, share - starved)
    if network < COMM_SHARE:
        return network, ()
    text = f"communication ({names}) {pct(share)} of step"
    if starved >= STARVED_EVIDENCE_SHARE:
        text += f", of which ranks queued for a CPU explain {pct(starved)}"
    return network, (Evidence(text, "comm_share", share, "training"),)


def cpu_queued_share(ctx: Context) -> float:
    """Share of the time the trainer's main thread was runnable but waiting for a CPU (the
    process's figure when the main thread is not measured alone); 0 when unknown."""
    t = ctx.trainer
    if t is None:
        return 0.0
    wait = t.main_wait_pct if t.main_wait_pct is not None else t.cpu_wait_pct
    return min(1.0, (wait or 0.0) / 100.0)


def job_traffic(ctx: Context) -> tuple[Evidence, ...]:
    """The busiest interface of the job's own network namespace (collectors.job_nics): the
    bytes its collectives move, where the monitor's own interfaces cannot see them."""
    job_id = ctx.job.job.job_id if ctx.job else ""
    mine = [n for n in ctx.nics if job_id and job_id in n.job_ids and _bytes(n) > 0]
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
