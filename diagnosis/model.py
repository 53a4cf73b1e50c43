"""The verdict types: what the engine says, with the numbers that justify it.

These classes are part of the CLI contract (``traintop diagnose --json``) and of the UI banner,
so they hold finished, human-readable text next to the raw value each statement is based on.
"""

from __future__ import annotations

from dataclasses import dataclass

BOTTLENECKS: tuple[str, ...] = (
    "data_cpu",
    "data_io",
    "data_starved",
    "compute",
    "host_overhead",
    "sync_stall",
    "network",
    "throttle_thermal",
    "throttle_power",
    "memory",
    "periodic_stall",
    "oversubscribed",
    "idle",
    "straggler",
    "unknown",
)

SEVERITIES: tuple[str, ...] = ("ok", "info", "warning", "error")
PANELS: tuple[str, ...] = (
    "gpu",
    "cpu",
    "memory",
    "disk",
    "network",
    "processes",
    "training",
    "dataloader",
)


@dataclass(frozen=True, slots=True)
class Evidence:
    """One measured fact behind a finding; ``panel`` tells the UI where to point the user."""

    text: str
    metric: str
    value: float | None
    panel: str


@dataclass(frozen=True, slots=True)
class Finding:
    """One bottleneck that holds over the window, with its evidence and ranked remedies."""

    bottleneck: str
    confidence: float
    severity: str
    summary: str
    evidence: tuple[Evidence, ...] = ()
    remedies: tuple[str, ...] = ()
    share: float = 0.0  # the share of the time its cause explains (what ranks it)


@dataclass(frozen=True, slots=True)
class JobSummary:
    """The throughput of one attached job, carried so the JSON output can list every job."""

    pid: int
    name: str
    steps_per_s: float | None
    samples_per_s: float | None
    data_wait_share: float | None
    job_id: str = ""
    rank: int = 0
    state: str = "live"


@dataclass(frozen=True, slots=True)
class Straggler:
    """The rank the others wait for: ``gap`` is how much more of its step it loses (or how much
    less it waits on its peers) than the median of the other ranks, as a 0..1 share."""

    rank: int
    pid: int
    gap: float
    text: str


@dataclass(frozen=True, slots=True)
class RankTime:
    """Where one rank's time went (the time budget): the share of each phase, and the excess
    of its long steps (over 3x the median) split by the phase it fell in, as shares of all of
    its time."""

    rank: int
    pid: int
    phases: tuple[tuple[str, float], ...]
    long_steps: int = 0
    excess: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class JobVerdict:
    """One job's verdict: every rank of it folded into one finding, current while the job runs,
    its final word (in the past tense, with ``ended_at``) once it finished or crashed."""

    job_id: str
    name: str
    state: str
    ranks: tuple[JobSummary, ...]
    primary: Finding
    also: tuple[Finding, ...] = ()
    lost_share: float = 0.0
    since_s: float | None = None
    ended_at: float | None = None  # wall clock, seconds since the epoch
    straggler: Straggler | None = None
    budget: tuple[RankTime, ...] = ()

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


LIVE_STATES = frozenset({"live", "stalled"})


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer to "why is my training slow?" for one window.

    ``since_s`` is how long the primary has held; the stateless :func:`diagnose` cannot know it
    and leaves ``None``, the stabilizer fills it in.
    """

    primary: Finding
    also: tuple[Finding, ...]
    mode: str
    window_s: float
    since_s: float | None
    jobs: tuple[JobSummary, ...] = ()
    per_job: tuple[JobVerdict, ...] = ()  # live jobs worst first, then ended ones newest first
    job_id: str | None = None  # the job the primary is about (None: the box, or no live job)
    live_jobs: int = 0
    idle_box: bool = False  # no live attached job and no process on any GPU: nothing runs

    @property
    def other_jobs(self) -> tuple[JobVerdict, ...]:
        """The live jobs the primary is not about, worst first (the banner's "+2 other jobs")."""
        return tuple(j for j in self.per_job if j.live and j.job_id != self.job_id)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A finding plus the share of step time it is estimated to cost, used only for ranking."""

    finding: Finding
    lost_share: float
