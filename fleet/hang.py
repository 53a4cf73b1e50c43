"""A stopped multi-node job, from Prometheus: which rank the others wait for, its node, and
where it is.

Each exporter publishes, per running rank, the age of its last step and, per process group,
the sequence number of the newest collective it entered and how long it has waited in it
(exporter/job_families.py); and, for a rank that stopped stepping, where it is as its node's
monitor sees it (``traintop_job_stuck_info``: what the kernel says of it, its innermost frames,
the worker it waits on; diagnosis/stuck_place.py).  That is what a monitor reads on one box,
for every node: so the fleet judges a stopped job with the monitor's own rules
(``traintop.diagnosis.hang``), says it in the monitor's one line with the nodes ("HANG 1m12s ·
rank 5 on node-b in fetch_shard (data.py:41) · others wait in all_reduce") and shows each stuck
rank's place under it.  A rank whose node stopped answering counts as gone: a node that died
holds its peers the way a dead rank does.  Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from traintop.collectors import stall
from traintop.collectors.snapshot import Collective, JobSnapshot, RankStack
from traintop.diagnosis.hang import hang_of
from traintop.diagnosis.hang_finding import KIND_WORDS, SEVERITIES
from traintop.diagnosis.hang_line import hang_line
from traintop.diagnosis.model import Hang
from traintop.diagnosis.stuck_place import frames_of, proc_of
from traintop.diagnosis.text import duration, rank_list
from traintop.fleet.model import FleetPlace, FleetRank, FleetVerdict

CONFIDENCE = 0.9  # the sequence numbers say it; no stack says where the stuck rank is


def hang_verdict(ranks: Sequence[FleetRank]) -> tuple[FleetVerdict, tuple[FleetRank, ...]] | None:
    """The job's verdict when it stopped stepping, and its ranks with the stuck ones marked;
    None while it steps (or nothing says how long it has not)."""
    limits = stall.from_env()
    hang = hang_of([_snapshot(r, limits) for r in ranks])
    if hang is None or hang.kind == "unknown":
        return None
    held = ("not_entered", "dead_rank", "stopped")
    stuck = set(hang.missing) if hang.kind in held else set()
    marked = tuple(replace(r, stuck=r.rank in stuck) for r in ranks)
    hosts = {r.rank: r.hostname for r in ranks}
    line = hang_line(hang, host=hosts.get)
    case = f"Job {hang.level} {duration(hang.for_s)}: {_summary(hang, ranks)}"
    evidence = (case, *_evidence(hang, ranks))
    return FleetVerdict("hang", SEVERITIES.get(hang.level, "error"), CONFIDENCE, line,
                        evidence), marked  # fmt: skip


def _snapshot(rank: FleetRank, limits: tuple[stall.Threshold, stall.Threshold]) -> JobSnapshot:
    """A rank as the monitor's hang rules read one: state, last step, limits, ledger, and where
    its node's monitor saw it (its kernel state, its frames)."""
    state = "crashed" if rank.state == "stale" else rank.state or "live"
    collectives = tuple(_collective(c.group, c.seq, c.op, c.wait_s) for c in rank.collectives)
    place = rank.place
    return JobSnapshot(
        pid=rank.pid or rank.rank, name="", rank=rank.rank, local_rank=rank.local_rank or 0,
        world_size=0,
        state=state, steps_total=0, steps_per_s=None, samples_per_s=None,
        step_time_p50_s=rank.step_p50_s, step_time_p95_s=None, data_wait_share=None,
        data_wait_p50_s=None, data_wait_p95_s=None, batches_per_s=None, gpu_busy_share=None,
        last_step_age_s=rank.last_step_age_s, collectives=collectives,
        collectives_total=len(collectives) if collectives else None,
        stall_after_s=limits[0].after_s(rank.step_p50_s),
        hang_after_s=limits[1].after_s(rank.step_p50_s),
        stack=_stack(place), proc=proc_of(place.process) if place is not None else None,
    )  # fmt: skip


def _stack(place: FleetPlace | None) -> RankStack | None:
    frames = frames_of(place.frames) if place is not None else ()
    return RankStack(frames, 0.0, "exporter") if frames else None


def _where(place: FleetPlace | None) -> str:
    """ " · log_metrics (train.py:88) · waits on worker 8812 ...": what the rank's text does
    not already say."""
    if place is None:
        return ""
    worker = f"waits on worker {place.worker}" if place.worker else ""
    return "".join(f" · {part}" for part in (place.where, worker) if part)


def place_text(rank: FleetRank) -> str:
    """Where a stuck rank is, under it in the ranks table: "after all_reduce #1041
    (0:default_pg) · stopped · log_metrics (train.py:88)"."""
    place = rank.place
    if place is None:
        return ""
    process = f"{place.process}: {place.blocked_on}" if place.blocked_on else place.process
    worker = f"waits on worker {place.worker}" if place.worker else ""
    parts = (place.collective, process, place.where, worker)
    return " · ".join(p for p in parts if p)


def _collective(group: str, seq: int, op: str | None, wait_s: float | None) -> Collective:
    """A ledger entry as its exporter summed it up: inside (waiting ``wait_s``) or not."""
    inside = wait_s is not None
    return Collective(group, seq, op or "?", "", 0, wait_s or 0.0, None if inside else 0.0)


def on_nodes(ranks: Sequence[int], fleet: Sequence[FleetRank]) -> str:
    """ "rank 5 on node-b", "ranks 4-5 on node-b, rank 9 on node-c"."""
    hosts = {r.rank: r.hostname for r in fleet}
    by_host: dict[str, list[int]] = {}
    for rank in sorted(ranks):
        by_host.setdefault(hosts.get(rank, "?"), []).append(rank)
    parts = [f"{'rank' if len(rs) == 1 else 'ranks'} {rank_list(rs)} on {host}"
             for host, rs in by_host.items()]  # fmt: skip
    return ", ".join(parts)


def _waiting(hang: Hang, fleet: Sequence[FleetRank]) -> tuple[str, bool]:
    """Who waits in the collective, and whether that is one rank (its verb agrees): a lone
    waiter is named with its node ("rank 2 on node-a"), more are counted."""
    if len(hang.inside) == 1:
        return on_nodes(hang.inside, fleet), True
    return (f"the {len(hang.inside)} ranks in it" if hang.inside else "the others"), False


def _summary(hang: Hang, fleet: Sequence[FleetRank]) -> str:
    what = f"{hang.op} #{hang.seq} ({hang.group})"
    who, one = _waiting(hang, fleet)
    waits = f"{who} {'waits' if one else 'wait'} in {what}"
    if hang.kind == "not_entered":
        return (f"{on_nodes(hang.missing, fleet)} never reached {what}, which {who} "
                f"{'has' if one else 'have'} waited in for {duration(hang.waited_s)}")  # fmt: skip
    if hang.kind == "dead_rank":
        gone = [p.rank for p in hang.ranks if p.state in ("gone", "failed")]
        tail = f"; {waits}" if hang.op else ""
        return (
            f"{on_nodes(gone, fleet)} gone (its process ended or its node stopped answering){tail}"
        )
    if hang.kind == "desync":
        return "the ranks are in collectives that differ: " + "; ".join(
            f"{on_nodes([p.rank for p in hang.ranks if p.collective == c], fleet)} in "
            f"{c.op} #{c.seq} ({c.group})"
            for c in {p.collective for p in hang.ranks if p.collective is not None}
        )  # fmt: skip
    if hang.kind == "not_finished":
        return f"every rank entered {what} and none left: the links or a node's devices"
    if hang.kind == "stopped":
        held = [p.rank for p in hang.ranks if p.proc is not None and p.proc.state in "Tt"]
        tail = f"; {waits}" if hang.op and hang.inside else ""
        return f"{on_nodes(held, fleet)} stopped (SIGSTOP, job control or a debugger){tail}"
    return "no rank is in a collective: a data or compute hang (traintop on the nodes shows where)"


def _evidence(hang: Hang, fleet: Sequence[FleetRank]) -> tuple[str, ...]:
    """One line per rank that is not where the others are, and the kind."""
    facts = [f"{KIND_WORDS.get(hang.kind, hang.kind)}: sequence numbers of every rank's "
             f"newest collective, from its exporter"]  # fmt: skip
    hosts = {r.rank: r.hostname for r in fleet}
    seen = {r.rank: r.place for r in fleet}
    facts += [f"rank {p.rank} on {hosts.get(p.rank, '?')}: {p.text}{_where(seen.get(p.rank))}"
              for p in hang.ranks if p.state != "inside"]  # fmt: skip
    return tuple(facts)
