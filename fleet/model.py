"""What the fleet view shows: nodes, one job's ranks across them, and the job's verdict.

Built from Prometheus answers by :mod:`traintop.fleet.build` (pure), on the fleet source's thread;
read by the fleet app.  Like ``traintop.collectors.snapshot``, raw numbers in base units, ``None``
for unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from traintop.diagnosis.job_groups import ENDED_ORDER

ENDED_STATES = frozenset(ENDED_ORDER)


@dataclass(frozen=True, slots=True)
class FleetGpu:
    """One GPU of a node, from dcgm-exporter-named series (ours or dcgm-exporter's own)."""

    hostname: str
    gpu: str
    util_pct: float | None = None
    temp_c: float | None = None
    slowdown_c: float | None = None
    reasons: int | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None


@dataclass(frozen=True, slots=True)
class FleetVerdict:
    """A bottleneck as the exporter or the fleet judged it."""

    bottleneck: str
    severity: str
    confidence: float
    summary: str = ""
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FleetCollective:
    """A rank's newest collective of one group, from its exporter's ledger series."""

    group: str
    seq: int
    op: str | None = None  # known while the rank is inside it
    wait_s: float | None = None  # how long it has been inside it; None when it is not


@dataclass(frozen=True, slots=True)
class FleetPlace:
    """Where a rank that stopped stepping is, as the monitor on its node saw it (its exporter's
    ``traintop_job_stuck_info``, diagnosis/stuck_place.py): "" for what it did not know."""

    process: str = ""  # sleeping, uninterruptible, stopped, traced, busy, ...
    blocked_on: str = ""  # "read /mnt/x.tar" (in uninterruptible sleep)
    collective: str = ""  # "all_reduce #1042 (0:default_pg)", "after all_reduce #1041 (...)"
    where: str = ""  # "log_metrics (train.py:88)"
    frames: str = ""  # "train.py:88 log_metrics < train.py:120 train"
    worker: str = ""  # the DataLoader worker it waits on


@dataclass(frozen=True, slots=True)
class FleetRank:
    """One rank of the selected job, where it runs and how fast."""

    rank: int
    hostname: str
    local_rank: int | None
    state: str | None
    steps_per_s: float | None
    step_p50_s: float | None
    step_p95_s: float | None
    data_wait_share: float | None
    comm_share: float | None
    straggler: bool = False
    ended_at: float | None = None  # wall clock, for a rank that ended (its exporter's word)
    last_step_age_s: float | None = None
    collectives: tuple[FleetCollective, ...] = ()
    stuck: bool = False  # the rank a stopped job waits for (fleet/hang.py)
    place: FleetPlace | None = None  # where it is, while it does not step
    pid: int | None = None

    @property
    def ended(self) -> bool:
        """Finished, crashed or restarted: no figure of it describes the present."""
        return self.state in ENDED_STATES

    @property
    def work_s(self) -> float | None:
        """Time per step the rank spends on its own work: the step minus its wait in
        collectives, which in a synchronous job is the wait for the slowest rank."""
        if self.step_p50_s is None:
            return None
        return self.step_p50_s * (1.0 - (self.comm_share or 0.0))


@dataclass(frozen=True, slots=True)
class FleetNode:
    """One exporter: its GPUs, its ranks of the selected job, and its own verdict."""

    hostname: str
    instance: str
    age_s: float | None
    stale: bool
    gpus: tuple[FleetGpu, ...] = ()
    ranks: tuple[int, ...] = ()
    steps_per_s: float | None = None
    verdict: FleetVerdict | None = None


@dataclass(frozen=True, slots=True)
class FleetJob:
    """A training job seen anywhere in the fleet; ``state`` as the monitor's jobs table folds
    its ranks' (live, stalled, else the worst end), ``ended_at`` its last rank's end."""

    job_id: str
    name: str
    ranks: int
    world_size: int | None
    state: str | None = None
    ended_at: float | None = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


@dataclass(frozen=True, slots=True, eq=False)
class FleetSnapshot:
    """One refresh of the fleet view; ``error`` is the one-line reason a refresh failed."""

    timestamp: float
    source: str
    job: FleetJob | None = None
    jobs: tuple[FleetJob, ...] = ()
    nodes: tuple[FleetNode, ...] = ()
    ranks: tuple[FleetRank, ...] = ()
    verdict: FleetVerdict | None = None
    error: str | None = None
