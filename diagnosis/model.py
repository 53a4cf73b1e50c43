"""The verdict types: what the engine says, with the numbers that justify it.

These classes are part of the CLI contract (``traintop diagnose --json``) and of the UI banner,
so they hold finished, human-readable text next to the raw value each statement is based on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from traintop.collectors.snapshot import Collective, Ending, Frame, ProcState, WorkerSnapshot

BOTTLENECKS: tuple[str, ...] = (
    "data_cpu",
    "data_io",
    "data_starved",
    "data_handoff",
    "compute",
    "host_overhead",
    "gil_contention",
    "sync_stall",
    "network",
    "throttle_thermal",
    "throttle_power",
    "memory",
    "host_memory",
    "periodic_stall",
    "oversubscribed",
    "idle",
    "straggler",
    "hang",
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
class Gain:
    """What one remedy is predicted to buy, from the measured time budget (diagnosis/gains.py).

    ``speedup`` is steps/s after the change over steps/s now (1.0: no gain), with its range
    (``low``..``high``) where the inputs are noisy; ``bound_by`` is what limits the job once
    it is applied (``compute``, ``cores``, ``quota``, ``disk``, ``latency``, ``workers``...).
    Where the effect cannot be modelled ``speedup`` is None: ``high`` is then the most it can
    buy where the budget bounds it ("up to"), else None too, and ``reason`` says why.
    """

    remedy: str
    speedup: float | None = None
    low: float | None = None
    high: float | None = None
    bound_by: str | None = None
    reason: str = ""  # why no figure, or what the figure counts ("the 2.0 s pause every 40 steps")
    steps_per_s: float | None = None  # the job's rate now
    change: str = ""  # the setting it changes, in a few words ("num_workers 1 → 4")
    knob: str = ""  # that setting's name, as compare names it ("num_workers")
    value: float | None = None  # the value it proposes

    @property
    def modelled(self) -> bool:
        return self.speedup is not None


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
    # What each remedy is predicted to buy, in the order of ``remedies`` (one each; a finding
    # made before predictions, an older recording's, has none)
    gains: tuple[Gain, ...] = ()

    def gain_of(self, remedy: str) -> Gain | None:
        """The prediction for one of ``remedies`` (None: none made)."""
        return next((g for g in self.gains if g.remedy == remedy), None)


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


HANG_KINDS: tuple[str, ...] = (
    "not_entered",  # ranks never reached the collective the others wait in
    "desync",  # the ranks wait in collectives that differ (op, sequence or shapes)
    "not_finished",  # every rank entered, none left: the link, or a peer's device
    "dead_rank",  # a rank's process is gone, the others wait for it (or failed after it)
    "no_collective",  # no rank is in one: a data or compute hang
    "stopped",  # a rank's process is stopped (SIGSTOP, job control) or held by a debugger
    "unknown",  # its ranks keep no collective ledger (an older traintop): the phase only
)
# stalled, hung (no step for the job's limits), busy (the ranks the others wait for use their
# CPU: working, not stuck, however long), crashed (an ended job's post-mortem)
HANG_LEVELS: tuple[str, ...] = ("stalled", "hung", "busy", "crashed")


@dataclass(frozen=True, slots=True)
class RankHang:
    """Where one rank of a stopped job is (diagnosis/hang.py)."""

    rank: int
    pid: int
    # inside (the collective), ahead (left it, in the group's next one), elsewhere (another
    # one), outside (none), gone (its process ended), failed (ended after its collective
    # raised: it fell with the one who went first)
    state: str
    text: str  # "in all_reduce #1042 for 1m12s", "not entered (last #1041)", "gone (crashed)"
    collective: Collective | None = None  # the one it is in (or, outside it, its last)
    frames: tuple[Frame, ...] = ()  # its training thread's stack, outermost first
    stack_source: str = ""  # helper or signal; "" when no stack was had
    proc: ProcState | None = None  # what the kernel says of its training thread
    worker: WorkerSnapshot | None = None  # the DataLoader worker it waits on for a batch
    # the DataLoader's pin_memory thread, when the rank waits on it and it waits on no worker
    pin_memory: tuple[Frame, ...] = ()


@dataclass(frozen=True, slots=True)
class StackFold:
    """Ranks whose innermost user frames are the same: one line, so the odd one stands out."""

    ranks: tuple[int, ...]
    where: str  # "all_reduce (distributed_c10d.py) at train.py:120 in step"
    frames: tuple[Frame, ...]  # the first of those ranks' whole stack


@dataclass(frozen=True, slots=True)
class Hang:
    """A job that stopped stepping: which kind of hang, which ranks, where (issue 25)."""

    level: str  # one of HANG_LEVELS
    kind: str  # one of HANG_KINDS
    for_s: float  # since the job's last step
    summary: str
    group: str | None = None  # the collective the others wait in
    seq: int | None = None
    op: str | None = None
    shapes: tuple[str, ...] = ()  # every shape seen in it (desync: more than one)
    inside: tuple[int, ...] = ()  # ranks in it
    missing: tuple[int, ...] = ()  # ranks not in it: never entered, elsewhere, or gone
    waited_s: float | None = None  # how long the first rank in it has waited
    timeout_s: float | None = None  # the group's timeout, when known
    ranks: tuple[RankHang, ...] = ()
    folds: tuple[StackFold, ...] = ()
    evidence: tuple[str, ...] = ()
    # One line of at most 76 cells, shortest first: who, where, for how long ("HANG 19s · rank
    # 2 in read_batch (train.py:37) · ranks 0-1 wait in backward"), the same on every surface
    line: str = ""

    @property
    def aborts_in_s(self) -> float | None:
        """Until PyTorch's collective timeout aborts the job (None: unknown)."""
        if self.timeout_s is None or self.waited_s is None:
            return None
        return max(0.0, self.timeout_s - self.waited_s)


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
    hang: Hang | None = None  # the job stopped stepping (or crashed in its collectives)
    budget: tuple[RankTime, ...] = ()
    # (pid, phase) of the rank whose time this answer cannot place (a straggler's own time, an
    # ``unknown``), while traintop has no fresh samples of its stack in that phase: for whoever
    # drives the collector to ask for them (JobCollector.sample_phase, diagnosis/where.py)
    sample: tuple[int, str] | None = None
    # How an ended job ended: the ending of the rank that explains it (diagnosis/run_life.py).
    ending: Ending | None = None

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


LIVE_STATES = frozenset({"live", "stalled", "starting"})


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
    """A finding plus the share of step time it is estimated to cost, used only for ranking.
    ``fixes`` makes its remedies where they cost a model's evaluation (the input pipeline's):
    only the findings a verdict keeps are given them (``findings.with_fixes``), not every rank's."""

    finding: Finding
    lost_share: float
    fixes: Callable[[], Iterable[str | Gain]] | None = field(
        default=None, compare=False, repr=False
    )
