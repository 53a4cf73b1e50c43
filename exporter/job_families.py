"""What only traintop knows, per job and rank: step rate, step-time quantiles, phases, state.

Every series carries ``job`` (the job id shared by all ranks of one job on every node, see
``collectors/job_key.py``), ``job_name``, ``rank``, ``local_rank`` and ``hostname``, so one
PromQL selector finds a multi-node job's ranks on every node.  Prometheus sets its own ``job``
label on scrape: the scrape config in docs/prometheus keeps ours with ``honor_labels: true``;
without it ours arrives as ``exported_job``, which ``traintop fleet`` reads too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    StateSetMetricFamily,
)
from prometheus_client.metrics_core import Metric

from traintop.collectors.snapshot import JobSnapshot, Snapshot
from traintop.diagnosis.signals import comm_phases

RANK_LABELS = ("job", "job_name", "rank", "local_rank", "hostname")
STATES = ("live", "stalled", "finished", "crashed", "restarted")
QUANTILES = (("0.5", "step_time_p50_s"), ("0.95", "step_time_p95_s"))

Reader = Callable[[JobSnapshot], float | None]

RANK_GAUGES: tuple[tuple[str, str, Reader], ...] = (
    ("traintop_job_steps_per_second", "Optimizer steps per second.", lambda j: j.steps_per_s),
    ("traintop_job_samples_per_second", "Samples per second.", lambda j: j.samples_per_s),
    (
        "traintop_job_data_wait_share",
        "Share of step time spent waiting for the next batch (0-1).",
        lambda j: j.data_wait_share,
    ),
    (
        "traintop_job_gpu_busy_share",
        "Share of step time the GPU was busy with the step (0-1).",
        lambda j: j.gpu_busy_share,
    ),
    (
        "traintop_job_last_step_age_seconds",
        "Seconds since the rank's last finished step.",
        lambda j: j.last_step_age_s,
    ),
    (
        "traintop_job_started_timestamp_seconds",
        "Wall-clock time the rank's ring was created, seconds since the epoch.",
        lambda j: j.started_at,
    ),
)


def rank_labels(job: JobSnapshot, hostname: str) -> list[str]:
    """The label values that name one rank of one job on one host."""
    return [job.job_id, job.name, str(job.rank), str(job.local_rank), hostname]


def communication_share(job: JobSnapshot) -> float | None:
    """Summed share of phases named like collectives; None when no such phase is timed
    (the zero-code shim times all-reduce inside backward, so absence is not a zero)."""
    comm = [p.share for p in comm_phases(job)]
    return sum(comm) if comm else None


def _gauge(name: str, doc: str, rows: list[tuple[list[str], float | None]]) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=RANK_LABELS)
    for labels, value in rows:
        if value is not None:
            family.add_metric(labels, float(value))
    return family


def _quantiles(rows: list[tuple[JobSnapshot, list[str]]]) -> Metric:
    family = GaugeMetricFamily(
        "traintop_job_step_time_seconds",
        "Step time quantile over the recent window.",
        labels=(*RANK_LABELS, "quantile"),
    )
    for job, labels in rows:
        for quantile, attr in QUANTILES:
            value = getattr(job, attr)
            if value is not None:
                family.add_metric([*labels, quantile], value)
    return family


def _phases(rows: list[tuple[JobSnapshot, list[str]]]) -> Metric:
    family = GaugeMetricFamily(
        "traintop_job_phase_seconds",
        "Mean seconds per step spent in each phase over the recent window.",
        labels=(*RANK_LABELS, "phase"),
    )
    for job, labels in rows:
        for phase in job.phases:
            family.add_metric([*labels, phase.name], phase.mean_s)
    return family


def _states(rows: list[tuple[JobSnapshot, list[str]]]) -> Metric:
    family = StateSetMetricFamily("traintop_job_state", "The rank's state.", labels=RANK_LABELS)
    for job, labels in rows:
        family.add_metric(labels, {state: job.state == state for state in STATES})
    return family


def _steps(rows: list[tuple[JobSnapshot, list[str]]]) -> Metric:
    family = CounterMetricFamily("traintop_job_steps", "Steps finished.", labels=RANK_LABELS)
    for job, labels in rows:
        family.add_metric(labels, job.steps_total)
    return family


def _info(rows: list[tuple[JobSnapshot, list[str]]]) -> Metric:
    family = InfoMetricFamily(
        "traintop_job", "The rank's process and job size.", labels=RANK_LABELS
    )
    for job, labels in rows:
        family.add_metric(labels, {"pid": str(job.pid), "world_size": str(job.world_size)})
    return family


def job_families(snapshot: Snapshot) -> Iterator[Metric]:
    """Every per-rank family over the snapshot's jobs (empty families when none run)."""
    rows = [(j, rank_labels(j, snapshot.host.hostname)) for j in snapshot.jobs]
    for name, doc, read in RANK_GAUGES:
        yield _gauge(name, doc, [(labels, read(job)) for job, labels in rows])
    comm = [(labels, communication_share(job)) for job, labels in rows]
    yield _gauge(
        "traintop_job_communication_share",
        "Share of step time in communication phases (0-1), where the job times them.",
        comm,
    )
    for build in (_quantiles, _phases, _states, _steps, _info):
        yield build(rows)
