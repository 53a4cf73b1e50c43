"""From Prometheus answers to a :class:`FleetSnapshot`: pure, so tests feed it plain data.

Series are matched by the labels both exporters write: ``hostname`` (dcgm-exporter's, also
``Hostname`` in its older releases) names the node, ``gpu`` the device, and the training job is
``job`` when the scrape config honours our labels, else ``exported_job`` (Prometheus renames
ours when it keeps its own scrape ``job``).  Ranks that vanished with a node that stopped
answering are kept from the previous refresh and shown as stale.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from statistics import fmean

from traintop.diagnosis.job_groups import ENDED_ORDER
from traintop.diagnosis.model import LIVE_STATES
from traintop.fleet.hang import hang_verdict
from traintop.fleet.model import (
    FleetCollective,
    FleetGpu,
    FleetJob,
    FleetNode,
    FleetPlace,
    FleetRank,
    FleetSnapshot,
    FleetVerdict,
)
from traintop.fleet.query import Sample
from traintop.fleet.verdict import ended_verdict, job_verdict, mark_straggler

GPU_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_DEV_GPU_TEMP": "temp_c",
    "DCGM_FI_DEV_SLOWDOWN_TEMP": "slowdown_c",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "reasons",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_MAX_SM_CLOCK": "sm_clock_max_mhz",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "power_limit_w",
}
QUERIES = {
    "nodes": "last_over_time(traintop_exporter_sample_timestamp_seconds[10m])",
    "up": "up == 0",  # only targets whose last scrape failed: all of them can be thousands
    "gpus": '{__name__=~"' + "|".join(GPU_FIELDS) + '"}',
    # Only the series the view reads: phases alone would be five more per rank.
    "jobs": '{__name__=~"traintop_job_(steps_per_second|step_time_seconds|data_wait_share'
    "|communication_share|state|info|ended_timestamp_seconds|last_step_age_seconds"
    '|collective_sequence|collective_wait_seconds|stuck_info)|traintop_(final_)?bottleneck"}',
}
ENDED_AT = "traintop_job_ended_timestamp_seconds"
RANK_FIELDS = {
    "traintop_job_steps_per_second": "steps_per_s",
    "traintop_job_data_wait_share": "data_wait_share",
    "traintop_job_communication_share": "comm_share",
    "traintop_job_last_step_age_seconds": "last_step_age_s",
    ENDED_AT: "ended_at",
}
QUANTILE_FIELDS = {"0.5": "step_p50_s", "0.95": "step_p95_s"}
PLACE_FIELDS = tuple(f.name for f in fields(FleetPlace))


@dataclass(frozen=True, slots=True)
class Answers:
    """The raw answer to each of :data:`QUERIES`, and the time they were asked at."""

    nodes: list[Sample]
    up: list[Sample]
    gpus: list[Sample]
    jobs: list[Sample]
    now: float


def job_of(labels: dict[str, str]) -> str:
    """Our training job id, whether or not the scrape config kept our ``job`` label."""
    return labels.get("exported_job", labels.get("job", ""))


def host_of(labels: dict[str, str]) -> str:
    """The node: dcgm-exporter's ``hostname`` (``Hostname`` before 3.3), else the target."""
    host = labels.get("hostname") or labels.get("Hostname")
    return host or labels.get("instance", "?").rsplit(":", 1)[0]


def _gpus(samples: list[Sample]) -> dict[str, tuple[FleetGpu, ...]]:
    fields: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for labels, value in samples:
        attr = GPU_FIELDS.get(labels.get("__name__", ""))
        if attr is not None:
            fields[(host_of(labels), labels.get("gpu", "?"))][attr] = value
    by_host: dict[str, list[FleetGpu]] = defaultdict(list)
    for (host, gpu), values in sorted(fields.items(), key=lambda kv: (kv[0][0], _num(kv[0][1]))):
        reasons = values.pop("reasons", None)
        by_host[host].append(
            FleetGpu(host, gpu, reasons=None if reasons is None else int(reasons), **values)
        )
    return {host: tuple(gpus) for host, gpus in by_host.items()}


def _num(text: str) -> tuple[int, str]:
    return (int(text), "") if text.isdigit() else (1 << 30, text)


def _rank_fields(samples: Iterable[Sample], job_id: str) -> dict[int, dict]:
    """Per rank of ``job_id``: hostname, local rank, state, rates, quantiles.

    One rank number may name two sets of series: a running run's, and an ended one's that
    used the same rendezvous under another name or on another node (an exporter serves one
    label set once).  The running one is the rank, else the one that ended last."""
    series: dict[tuple, dict] = defaultdict(dict)
    for labels, value in samples:
        name = labels.get("__name__", "")
        if job_of(labels) != job_id or not name.startswith("traintop_job") or "rank" not in labels:
            continue
        key = (
            int(labels["rank"]),
            labels.get("job_name"),
            host_of(labels),
            labels.get("local_rank"),
        )
        row = series[key]
        row.setdefault("hostname", host_of(labels))
        row.setdefault("local_rank", int(labels.get("local_rank", "0")))
        _rank_value(row, name, labels, value)
    ranks: dict[int, dict] = {}
    for (rank, *_), row in series.items():
        if rank not in ranks or _precedence(row) > _precedence(ranks[rank]):
            ranks[rank] = row
    return ranks


def _precedence(row: dict) -> tuple[bool, float]:
    return row.get("state") not in ENDED_ORDER, row.get("ended_at", 0.0)


def _rank_value(row: dict, name: str, labels: dict[str, str], value: float) -> None:
    if name in RANK_FIELDS:
        row[RANK_FIELDS[name]] = value
    elif name == "traintop_job_step_time_seconds" and labels.get("quantile") in QUANTILE_FIELDS:
        row[QUANTILE_FIELDS[labels["quantile"]]] = value
    elif name == "traintop_job_state" and value == 1:
        row["state"] = labels.get("traintop_job_state")
    elif name == "traintop_job_collective_sequence":
        row.setdefault("sequences", {})[labels.get("group", "?")] = int(value)
    elif name == "traintop_job_collective_wait_seconds":
        row.setdefault("waits", {})[labels.get("group", "?")] = (labels.get("op"), value)
    elif name == "traintop_job_stuck_info":
        row["place"] = FleetPlace(**{f: labels.get(f, "") for f in PLACE_FIELDS})
    elif name == "traintop_job_info" and labels.get("pid", "").isdigit():
        row["pid"] = int(labels["pid"])


def job_state(states: set[str]) -> str | None:
    """A job's state from its ranks': live while one steps, stalled while one is stalled,
    else the worst end (``traintop.diagnosis.job_groups`` folds them the same way)."""
    for state in ("live", "stalled", *ENDED_ORDER):
        if state in states:
            return state
    return None


class _Seen:
    """What the samples say of one job, gathered sample by sample."""

    def __init__(self, job_id: str, name: str) -> None:
        self.job_id, self.name = job_id, name
        self.ranks: set[str] = set()
        self.states: set[str] = set()
        self.size: int | None = None
        self.ended_at: float | None = None

    def add(self, labels: dict[str, str], value: float) -> None:
        self.ranks.add(labels["rank"])
        if "world_size" in labels:
            self.size = int(labels["world_size"])
        name, state = labels.get("__name__"), labels.get("traintop_job_state", "")
        if name == "traintop_job_state" and value == 1:
            self.states.add(state)
            if state in LIVE_STATES:  # a running run's name, where an ended one shares the id
                self.name = labels.get("job_name", self.job_id)
        elif name == ENDED_AT:
            self.ended_at = max(value, self.ended_at or value)

    def job(self) -> FleetJob:
        state = job_state(self.states)
        return FleetJob(self.job_id, self.name, len(self.ranks), self.size, state, self.ended_at)


def _jobs(samples: list[Sample]) -> tuple[FleetJob, ...]:
    """Every job with ranks somewhere: running ones first, most ranks first; then the ended
    ones, the newest end first."""
    seen: dict[str, _Seen] = {}
    for labels, value in samples:
        job = job_of(labels)
        if "rank" in labels and job:
            seen.setdefault(job, _Seen(job, labels.get("job_name", job))).add(labels, value)
    return tuple(sorted((s.job() for s in seen.values()), key=_job_order))


def _job_order(job: FleetJob) -> tuple:
    if job.ended:
        return (1, -(job.ended_at or 0.0), job.name, job.job_id)
    return (0, -job.ranks, job.name, job.job_id)


def pick_job(jobs: tuple[FleetJob, ...], wanted: str | None) -> FleetJob | None:
    """The job named (by name or id), else the running one with most ranks (``jobs`` lists
    those first), else the one that ended last."""
    if wanted is None:
        return jobs[0] if jobs else None
    return next((j for j in jobs if wanted in (j.name, j.job_id)), None)


def _verdicts(samples: list[Sample], job: FleetJob | None) -> dict[str, FleetVerdict]:
    """Each node's verdict for the job, else its host-wide one (``job_name`` empty); for an
    ended job, each node's last verdict on it (the host's present says nothing about it)."""
    ended = job is not None and job.ended
    metric = "traintop_final_bottleneck" if ended else "traintop_bottleneck"
    found: dict[str, tuple[int, FleetVerdict]] = {}
    for labels, value in samples:
        if labels.get("__name__") != metric:
            continue
        mine = job is not None and job_of(labels) == job.job_id
        if not mine and (ended or labels.get("job_name")):
            continue
        verdict = FleetVerdict(
            labels.get("bottleneck", "unknown"), labels.get("severity", "info"), value
        )
        host = host_of(labels)
        if host not in found or int(mine) > found[host][0]:
            found[host] = (int(mine), verdict)
    return {host: verdict for host, (_, verdict) in found.items()}


def _node_meta(answers: Answers, stale_after_s: float) -> dict[str, tuple[str, float, bool]]:
    """Per exporter node: its scrape target, the age of its last sample, and staleness
    (the sample too old, or Prometheus's last scrape of it failed)."""
    down = {labels.get("instance") for labels, value in answers.up if value == 0}
    meta: dict[str, tuple[str, float, bool]] = {}
    for labels, stamp in answers.nodes:
        instance, age = labels.get("instance", ""), max(0.0, answers.now - stamp)
        meta[host_of(labels)] = (instance, age, age > stale_after_s or instance in down)
    return meta


def _rank(rank: int, row: dict) -> FleetRank:
    """One rank; an ended one without figures, whatever an exporter from before ended runs
    stepped aside still serves: its last rate would read as a running rank's."""
    figures = {} if row.get("state") in ENDED_ORDER else row
    return FleetRank(
        rank=rank,
        hostname=row["hostname"],
        local_rank=row.get("local_rank"),
        state=row.get("state"),
        steps_per_s=figures.get("steps_per_s"),
        step_p50_s=figures.get("step_p50_s"),
        step_p95_s=figures.get("step_p95_s"),
        data_wait_share=figures.get("data_wait_share"),
        comm_share=figures.get("comm_share"),
        ended_at=row.get("ended_at"),
        last_step_age_s=figures.get("last_step_age_s"),
        collectives=_collectives(figures),
        place=figures.get("place"),
        pid=row.get("pid"),
    )


def _collectives(row: dict) -> tuple[FleetCollective, ...]:
    """The rank's newest collective per group, with how long it waits in it when it does."""
    waits = row.get("waits", {})
    return tuple(
        FleetCollective(group, seq, *waits.get(group, (None, None)))
        for group, seq in sorted(row.get("sequences", {}).items())
    )


def _ranks(
    answers: Answers, job: FleetJob, stale: set[str], previous: FleetSnapshot | None
) -> tuple[FleetRank, ...]:
    """The job's ranks; those on stale nodes, or gone since the last refresh, as stale (a
    rank that had ended is gone for good: its grace period on the exporter is over)."""
    fresh = _rank_fields(answers.jobs, job.job_id)
    ranks = {r: _rank(r, row) for r, row in fresh.items()}
    if previous is not None and previous.job is not None and previous.job.job_id == job.job_id:
        for old in previous.ranks:
            if not old.ended:
                ranks.setdefault(old.rank, replace(old, straggler=False))
    for rank, row in ranks.items():
        if row.hostname in stale or rank not in fresh:
            ranks[rank] = replace(row, state="stale")
    return mark_straggler(tuple(ranks[r] for r in sorted(ranks)))


def _node(
    host: str,
    meta: dict[str, tuple[str, float, bool]],
    gpus: dict[str, tuple[FleetGpu, ...]],
    ranks: tuple[FleetRank, ...],
    verdicts: dict[str, FleetVerdict],
) -> FleetNode:
    instance, age, stale = meta.get(host, ("", None, False))
    mine = [r for r in ranks if r.hostname == host]
    rates = [r.steps_per_s for r in mine if r.steps_per_s is not None and r.state != "stale"]
    return FleetNode(
        hostname=host,
        instance=instance,
        age_s=age,
        stale=stale,
        gpus=gpus.get(host, ()),
        ranks=tuple(r.rank for r in mine),
        steps_per_s=fmean(rates) if rates else None,
        verdict=verdicts.get(host),
    )


def _missing_job(wanted: str | None, jobs: tuple[FleetJob, ...]) -> str | None:
    if wanted is None or any(wanted in (j.name, j.job_id) for j in jobs):
        return None
    listing = ", ".join(j.name for j in jobs) or "none"
    return f"no training job {wanted!r} in Prometheus; jobs seen: {listing}"


def build_fleet(
    answers: Answers,
    *,
    wanted: str | None,
    stale_after_s: float,
    source: str,
    previous: FleetSnapshot | None = None,
) -> FleetSnapshot:
    """One fleet snapshot from the four answers (and the previous one, for vanished ranks)."""
    jobs = _jobs(answers.jobs)
    job = pick_job(jobs, wanted)
    meta = _node_meta(answers, stale_after_s)
    stale = {host for host, (_, _, is_stale) in meta.items() if is_stale}
    ranks = _ranks(answers, job, stale, previous) if job is not None else ()
    gpus = _gpus(answers.gpus)
    verdicts = _verdicts(answers.jobs, job)
    hosts = sorted(set(meta) | set(gpus) | {r.hostname for r in ranks})
    nodes = tuple(_node(h, meta, gpus, ranks, verdicts) for h in hosts)
    judge = ended_verdict if job is not None and job.ended else job_verdict
    stopped = hang_verdict(ranks) if job is not None and not job.ended else None
    if stopped is not None:  # a stopped job: which rank, on which node, the others wait for
        ranks, judge = stopped[1], lambda _nodes, _ranks: stopped[0]
    return FleetSnapshot(
        timestamp=answers.now,
        source=source,
        job=job,
        jobs=jobs,
        nodes=nodes,
        ranks=ranks,
        verdict=judge(nodes, ranks) if nodes else None,
        error=_missing_job(wanted, jobs),
    )
