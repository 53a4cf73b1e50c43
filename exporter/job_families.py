"""What only traintop knows, per job and rank: step rate, step-time quantiles, phases, state.

Every series carries ``job`` (the job id shared by all ranks of one job on every node, see
``collectors/job_key.py``), ``job_name``, ``rank``, ``local_rank`` and ``hostname``, so one
PromQL selector finds a multi-node job's ranks on every node.  Prometheus sets its own ``job``
label on scrape: the scrape config in docs/prometheus keeps ours with ``honor_labels: true``;
without it ours arrives as ``exported_job``, which ``traintop fleet`` reads too.

Rates, shares, quantiles and phases describe a running rank (``LIVE_GAUGES``): an ended rank
has none, so no ``sum()`` counts it; it keeps its identity, state and step count and gains its
end time, for the grace period ``exporter/ended.py`` keeps it.

The collective ledger (traintop/ledger.py) of a running rank that stopped stepping (the
collector reads it from half the stall limit on) gives, per process group, the sequence number
of the newest collective it entered, and how long it has been inside it while it is:
with the age of its last step, what `traintop fleet` needs to name the rank a stopped
multi-node job waits for, and its node (fleet/hang.py).
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

from traintop.collectors.snapshot import JobSnapshot
from traintop.diagnosis.signals import comm_phases
from traintop.exporter.published import ServedRanks
from traintop.exporter.stuck_families import stuck_family

RANK_LABELS = ("job", "job_name", "rank", "local_rank", "hostname")
# Extended, never renamed: starting (no step yet), stopped (by a signal), gone (no word: killed,
# or died in native code) came with a run's life; crashed is a run that raised.
STATES = ("live", "stalled", "finished", "crashed", "restarted", "starting", "stopped", "gone")
# How an ended rank ended, the kernel's word included: an OOM kill is told from a plain SIGKILL
ENDINGS = ("finished", "raised", "exited", "signal", "oom_killed", "sigkill", "gone")
BY_STATE = {"finished": "finished", "crashed": "raised", "stopped": "signal", "gone": "gone"}
QUANTILES = (("0.5", "step_time_p50_s"), ("0.95", "step_time_p95_s"))

Reader = Callable[[JobSnapshot], float | None]
Rows = list[tuple[JobSnapshot, list[str]]]


def rank_labels(job: JobSnapshot, hostname: str) -> list[str]:
    """The label values that name one rank of one job on one host."""
    return [job.job_id, job.name, str(job.rank), str(job.local_rank), hostname]


def communication_share(job: JobSnapshot) -> float | None:
    """Summed share of phases named like collectives; None when no such phase is timed
    (the zero-code shim times all-reduce inside backward, so absence is not a zero)."""
    comm = [p.share for p in comm_phases(job)]
    return sum(comm) if comm else None


LIVE_GAUGES: tuple[tuple[str, str, Reader], ...] = (
    ("traintop_job_steps_per_second", "Optimizer steps per second.", lambda j: j.steps_per_s),
    ("traintop_job_samples_per_second", "Samples per second.", lambda j: j.samples_per_s),
    (
        "traintop_job_data_wait_share",
        "Share of step time spent waiting for the next batch (0-1).",
        lambda j: j.data_wait_share,
    ),
    (
        "traintop_job_gpu_busy_share",
        "Share of time a kernel of the rank ran on its GPU, by the card's counters (0-1).",
        lambda j: j.gpu_busy_share,
    ),
    (
        "traintop_job_gpu_queued_share",
        "Share of step time with work queued on the GPU stream, the CUDA-event span (0-1): "
        "an upper bound of busy.",
        lambda j: j.gpu_queued_share,
    ),
    (
        "traintop_job_last_step_age_seconds",
        "Seconds since the rank's last finished step.",
        lambda j: j.last_step_age_s,
    ),
    (
        "traintop_job_communication_share",
        "Share of step time in communication phases (0-1), where the job times them.",
        communication_share,
    ),
)
STARTED = (
    "traintop_job_started_timestamp_seconds",
    "Wall-clock time the rank's ring was created, seconds since the epoch.",
)
ENDED = (
    "traintop_job_ended_timestamp_seconds",
    "Wall-clock time an ended rank ended, seconds since the epoch (served for --keep-ended).",
)
FIRST_STEP = (
    "traintop_job_first_step_seconds",
    "How long the rank's first step took (the warm-up: compile, graph capture), once it ended.",
)


def _gauge(name: str, doc: str, rows: list[tuple[list[str], float | None]]) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=RANK_LABELS)
    for labels, value in rows:
        if value is not None:
            family.add_metric(labels, float(value))
    return family


def _quantiles(rows: Rows) -> Metric:
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


def _phases(rows: Rows) -> Metric:
    family = GaugeMetricFamily(
        "traintop_job_phase_seconds",
        "Mean seconds per step spent in each phase over the recent window.",
        labels=(*RANK_LABELS, "phase"),
    )
    for job, labels in rows:
        for phase in job.phases:
            family.add_metric([*labels, phase.name], phase.mean_s)
    return family


def _collectives(rows: Rows) -> Iterator[Metric]:
    """Per rank and group: its newest collective's sequence number, and while the rank is
    inside it, for how long (``op`` names it)."""
    sequence = GaugeMetricFamily(
        "traintop_job_collective_sequence",
        "Sequence number of the newest collective the rank entered in the group.",
        labels=(*RANK_LABELS, "group"),
    )
    inside = GaugeMetricFamily(
        "traintop_job_collective_wait_seconds",
        "Seconds the rank has been inside its newest collective of the group (while inside).",
        labels=(*RANK_LABELS, "group", "op"),
    )
    for job, labels in rows:
        for c in job.collectives:
            sequence.add_metric([*labels, c.group], c.seq)
            if c.inside:
                inside.add_metric([*labels, c.group, c.op], c.age_s)
    yield sequence
    yield inside


def _states(rows: Rows) -> Metric:
    family = StateSetMetricFamily("traintop_job_state", "The rank's state.", labels=RANK_LABELS)
    for job, labels in rows:
        family.add_metric(labels, {state: job.state == state for state in STATES})
    return family


def ending_of(job: JobSnapshot) -> str | None:
    """The ``traintop_job_ending`` state of an ended rank (None: it runs, or its end is not
    known): a rank gone, or raising after its worker was killed, that the OOM killer took reads
    ``oom_killed``; one a SIGKILL took that the OOM killer did not send, ``sigkill``."""
    ending = job.ending
    if ending is None:  # a recording made before endings were kept: its state says what it can
        return BY_STATE.get(job.state)
    if ending.kill is not None:
        return "oom_killed" if ending.kill.by == "oom" else "sigkill"
    return ending.kind if ending.kind in ENDINGS else "gone"


def _endings(rows: Rows) -> Metric:
    family = StateSetMetricFamily(
        "traintop_job_ending", "How an ended rank ended.", labels=RANK_LABELS
    )
    for job, labels in rows:
        found = ending_of(job)
        if found is not None:
            family.add_metric(labels, {name: found == name for name in ENDINGS})
    return family


def _steps(rows: Rows) -> Metric:
    family = CounterMetricFamily("traintop_job_steps", "Steps finished.", labels=RANK_LABELS)
    for job, labels in rows:
        family.add_metric(labels, job.steps_total)
    return family


def _info(rows: Rows) -> Metric:
    family = InfoMetricFamily(
        "traintop_job", "The rank's process and job size.", labels=RANK_LABELS
    )
    for job, labels in rows:
        family.add_metric(labels, {"pid": str(job.pid), "world_size": str(job.world_size)})
    return family


def job_families(ranks: ServedRanks, hostname: str) -> Iterator[Metric]:
    """Every per-rank family (empty families when no rank is served): the running ranks'
    figures, and identity, state, steps and start of every served rank, ended ones too."""
    live = [(j, rank_labels(j, hostname)) for j in ranks.live]
    ended = [(j, rank_labels(j, hostname)) for j in ranks.ended]
    for name, doc, read in LIVE_GAUGES:
        yield _gauge(name, doc, [(labels, read(job)) for job, labels in live])
    yield _quantiles(live)
    yield _phases(live)
    yield from _collectives(live)
    yield stuck_family(live, RANK_LABELS)
    yield _gauge(*STARTED, [(labels, job.started_at) for job, labels in live + ended])
    yield _gauge(*ENDED, [(labels, job.ended_at) for job, labels in ended])
    yield _gauge(*FIRST_STEP, [(labels, job.first_step_s) for job, labels in live + ended])
    for build in (_states, _steps, _info):
        yield build(live + ended)
    yield _endings(ended)
