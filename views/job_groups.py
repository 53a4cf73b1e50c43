"""Jobs as the Training panel lists them: the ranks of one job folded into one row.

Each rank writes its own ring, but the questions a user asks are about the job: how fast it
goes, which rank holds it back, whether it still runs.  Which ranks make one job is decided once,
by :func:`traintop.diagnosis.job_groups.group_jobs` (ranks sharing ``JobSnapshot.job_id``, a live
run kept apart from ended runs on the same rendezvous), so the table and the verdict always agree;
this module folds each group's ranks into the figures of its row.  Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace

from traintop.collectors.phase_names import is_comm_phase
from traintop.collectors.snapshot import GpuStatus, HostInfo, JobSnapshot, PhaseShare, Snapshot
from traintop.diagnosis.job_groups import JobGroup as RankGroup
from traintop.diagnosis.job_groups import group_jobs, settled
from traintop.diagnosis.model import Hang
from traintop.diagnosis.run_life import ending_text, post_mortem_due, starting_finding
from traintop.views.format import fmt_age, fmt_seconds

LONG_PHASE_STEPS = 5.0  # a live job's current phase is shown once it outlasts 5 p50 steps
ENDED_COLLAPSE_S = 30.0  # an ended job keeps its own row this long, then joins the summary row
RUNNING_STATES = frozenset({"live", "stalled", "starting"})
TERMINAL_STATES = frozenset({"crashed", "finished", "stopped", "gone"})
_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True, slots=True)
class JobGroup:
    """One job: its ranks (sorted by rank) and the figures folded over them."""

    key: str  # unique among the rows: the job id and the pid of its lowest rank
    ranks: tuple[JobSnapshot, ...]
    state: str
    world_size: int
    steps_per_s: float | None  # the slowest rank's: a synchronised job goes at its pace
    samples_per_s: float | None  # summed; None unless every rank reports it
    step_time_p50_s: float | None  # the slowest rank's
    data_wait_share: float | None  # the rank that waits most
    slowest: tuple[int, float] | None  # (rank, own work vs the fastest rank - 1)
    gaps: dict[int, float]  # rank -> own work vs the fastest rank - 1 (see work_gaps)
    started_at: float | None
    ended_at: float | None  # wall clock of an ended job's end
    last_step_at: float | None  # wall clock of the newest step of any rank (None: none yet)
    hang: Hang | None = None  # stopped stepping (or crashed in its collectives): the verdict's case
    first_step_s: float | None = None  # its slowest rank's first step: the warm-up's cost
    # Its life in a line: where it is while it starts, how it ended once it did (else "").
    life: str = ""

    @property
    def name(self) -> str:
        return self.ranks[0].name

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    def has_pid(self, pid: int | None) -> bool:
        return any(rank.pid == pid for rank in self.ranks)

    @property
    def rank_count(self) -> str:
        """ "8", or "6/8" while only some ranks of the world are seen."""
        seen = len(self.ranks)
        return str(seen) if seen >= self.world_size else f"{seen}/{self.world_size}"


@dataclass(frozen=True, slots=True)
class EndedSummary:
    """The one row that stands for the jobs that ended more than ENDED_COLLAPSE_S ago."""

    count: int
    states: tuple[tuple[str, int], ...]  # ("finished", 20), ("crashed", 4)
    expanded: bool


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders digit runs by value: sweep2 before sweep10, as people count."""
    parts = _DIGITS.split(name.lower())
    return tuple((1, int(part)) if part.isdigit() else (0, part) for part in parts if part)


def job_groups(snapshot: Snapshot) -> list[JobGroup]:
    """Every job of ``snapshot``, running jobs first, each part in natural name order."""
    groups = [fold(group, snapshot.timestamp) for group in group_jobs(snapshot)]
    return sorted(groups, key=lambda g: (not g.running, natural_key(g.name), g.key))


def groups_of(jobs: Sequence[JobSnapshot], now: float) -> list[JobGroup]:
    """:func:`job_groups` for the job list alone (`traintop jobs`, `attach`), sampled at
    wall-clock ``now``: the grouping looks at nothing else of a snapshot."""
    bare = Snapshot(now, 0.0, 0.0, HostInfo("", 0.0, 0), None, None, (), (), (),
                    GpuStatus(False), (), tuple(jobs))  # fmt: skip
    return job_groups(bare)


def fold(group: RankGroup, now: float) -> JobGroup:
    """The job row's figures, from its ranks sampled at wall-clock ``now``."""
    # here, at the first job: with the readers of workers and stacks it needs, 0.02 s of a
    # monitor's start that has no job to show
    from traintop.diagnosis.hang import crash_of, hang_of

    ranks = group.ranks
    gaps = work_gaps(ranks)
    return JobGroup(
        key=f"{group.job_id}#{ranks[0].pid}",
        ranks=ranks,
        state=group.state,
        world_size=max(job.world_size for job in ranks),
        steps_per_s=_pick(min, (job.steps_per_s for job in ranks)),
        samples_per_s=total_samples(ranks),
        step_time_p50_s=_pick(max, (job.step_time_p50_s for job in ranks)),
        data_wait_share=_pick(max, (job.data_wait_share for job in ranks)),
        slowest=slowest_rank(gaps),
        gaps=gaps,
        started_at=_pick(min, (job.started_at for job in ranks)),
        ended_at=group.ended_at,
        last_step_at=_pick(max, (_stepped_at(job, now) for job in ranks)),
        hang=hang_of(ranks)
        if group.live
        else crash_of(ranks)
        if post_mortem_due(group.state)
        else None,
        first_step_s=_pick(max, (job.first_step_s for job in ranks)),
        life=life_line(group, now),
    )


def fmt_first_step(seconds: float) -> str:
    """A first step's length: "850 ms", "12.4 s", then "3 min" as ages read."""
    return fmt_seconds(seconds) if seconds < 60 else fmt_age(seconds) or ""


def life_line(group: RankGroup, now: float) -> str:
    """ "starting: first step for 1m25s, on CPU in compile_fx (torch/_inductor)" (its
    longest-starting rank), or how an ended job ended; "" while it steps."""
    if group.state == "starting":
        return starting_finding(group.ranks, now).summary
    return ending_text(group.ranks) if not group.live else ""


def _stepped_at(job: JobSnapshot, now: float) -> float | None:
    return None if job.last_step_age_s is None else now - job.last_step_age_s


def _pick(choose, values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return choose(known) if known else None


def total_samples(ranks: Sequence[JobSnapshot]) -> float | None:
    """Samples/s over all ranks, or None when a rank does not count them: a partial sum
    would read as a real, lower throughput."""
    rates = [job.samples_per_s for job in ranks]
    return None if None in rates else sum(rates)  # type: ignore[arg-type]


def rank_work_s(job: JobSnapshot) -> float | None:
    """Step time minus waiting for other ranks: in DDP every rank's step time converges on the
    slowest one, so only the time a rank spends on its own work points at the straggler."""
    if job.step_time_p50_s is None:
        return None
    waiting = sum(p.share for p in job.phases if is_comm_phase(p.name))
    return job.step_time_p50_s * (1.0 - min(waiting, 1.0))


def work_gaps(ranks: Sequence[JobSnapshot]) -> dict[int, float]:
    """Rank -> how much more own work per step it does than the fastest rank (0.42: +42 %)."""
    work = {job.rank: t for job in ranks if (t := rank_work_s(job)) is not None}
    fastest = min(work.values(), default=0.0)
    if len(work) < 2 or fastest <= 0:
        return {}
    return {rank: t / fastest - 1.0 for rank, t in work.items()}


def slowest_rank(gaps: dict[int, float]) -> tuple[int, float] | None:
    """(rank, gap to the fastest) of the rank with the most own work per step."""
    if not gaps:
        return None
    rank = max(gaps, key=lambda r: (gaps[r], -r))
    return rank, gaps[rank]


def long_live_phase(job: JobSnapshot) -> str | None:
    """ "in backward for 43 s" when worth a look: always for a stalled job (it names where the
    hang is), for a live one only once the phase outlasts ``LONG_PHASE_STEPS`` p50 steps."""
    phase, seconds = job.live_phase, job.live_phase_s
    if phase is None or seconds is None or job.state not in RUNNING_STATES:
        return None
    p50 = job.step_time_p50_s
    if job.state == "live" and (p50 is None or seconds <= LONG_PHASE_STEPS * p50):
        return None
    return f"in {phase} for {fmt_age(seconds)}"


def ended_for_s(group: JobGroup, now: float) -> float:
    """How long ago an ended job stopped (an unknown end counts as long ago)."""
    return float("inf") if group.ended_at is None else now - group.ended_at


def table_rows(
    groups: Sequence[JobGroup], now: float, expanded: bool, keep: str | None = None
) -> list[JobGroup | EndedSummary]:
    """Running jobs, jobs that ended lately, then one summary row for the older ended jobs
    (followed by them when ``expanded``).  The job keyed ``keep`` (the one the user looks
    at) keeps its own row."""
    settled = [
        g
        for g in groups
        if not g.running and ended_for_s(g, now) >= ENDED_COLLAPSE_S and g.key != keep
    ]
    gone = {g.key for g in settled}
    rows: list[JobGroup | EndedSummary] = [g for g in groups if g.key not in gone]
    if settled:
        counts: dict[str, int] = {}
        for group in settled:
            counts[group.state] = counts.get(group.state, 0) + 1
        states = tuple(sorted(counts.items(), key=lambda item: -item[1]))
        rows.append(EndedSummary(len(settled), states, expanded))
        rows += settled if expanded else []
    return rows


def same_but_clock(new: Sequence[JobSnapshot], old: Sequence[JobSnapshot] | None) -> bool:
    """Whether ``new`` says what ``old`` said but for the clock: the same ranks, where only
    an ended rank's last-step age may have grown.  An ended job's row counts its ages from
    the wall clock of its last step, so a sweep of ended runs costs the panel this
    comparison per tick instead of regrouping and redrawing every run."""
    if old is None or len(new) != len(old):
        return False
    return all(a is b or _only_aged(a, b) or a == b for a, b in zip(new, old, strict=True))


def _only_aged(new: JobSnapshot, old: JobSnapshot) -> bool:
    return new.state not in RUNNING_STATES and settled((new,)) == settled((old,))


def keep_last_numbers(job: JobSnapshot, previous: JobSnapshot | None) -> JobSnapshot:
    """A crashed or finished job keeps the numbers it last had, so the user sees where it died."""
    if previous is None or job.state not in TERMINAL_STATES:
        return job
    kept = {
        f.name: getattr(previous, f.name)
        for f in fields(job)
        if getattr(job, f.name) is None and getattr(previous, f.name) is not None
    }
    return replace(job, **kept) if kept else job


def mean_step(ranks: tuple[JobSnapshot, ...]) -> JobSnapshot:
    """The job's typical step: each phase's share and mean time averaged over its ranks."""
    if len(ranks) == 1:
        return ranks[0]
    totals: dict[str, list[float]] = {}
    for job in ranks:
        for phase in job.phases:
            total = totals.setdefault(phase.name, [0.0, 0.0])
            total[0] += phase.share / len(ranks)
            total[1] += phase.mean_s / len(ranks)
    phases = tuple(PhaseShare(name, share, mean) for name, (share, mean) in totals.items())
    waits = [job.data_wait_share for job in ranks if job.data_wait_share is not None]
    wait = sum(waits) / len(waits) if waits else None
    return replace(ranks[0], phases=phases, data_wait_share=wait)
