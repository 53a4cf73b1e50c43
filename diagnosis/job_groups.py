"""Which rank segments make one job, and whether that job is still running.

The collector reports one ``JobSnapshot`` per rank segment; ranks of one job share its
``job_id`` (collectors/job_key.py).  A job is live while any of its ranks starts, steps or is
stalled (a hung collective leaves the others stalled, not ended); it ended when every rank
finished, crashed, was stopped, was gone or was restarted.  The probe makes a run's id its own
(the token its ranks agree on through their store, traintop/run_token.py), but a rank that
never reached its process group, or an older writer, has only the rendezvous address, which the
next experiment reuses.  So an ended rank joins a live run only when their lifetimes overlap,
ended segments that repeat a rank belong to different earlier runs, and live ranks that repeat
a rank (an earlier run's rank stopped with SIGSTOP, still alive) are split into runs by when
they started: a rank joins the newest run that lacks its rank and started near it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from traintop.collectors.snapshot import JobSnapshot, Snapshot
from traintop.diagnosis.model import LIVE_STATES

# Ended states, worst first: a job with one crashed rank crashed; one rank gone without a word
# is why the others were stopped (torchrun stops the rest when one dies).
ENDED_ORDER = ("crashed", "gone", "stopped", "restarted", "finished")
RUN_GAP_S = 30.0  # ranks of one run start within this of each other (split_live)


@dataclass(frozen=True, slots=True)
class JobGroup:
    """The newest summary of every rank of one job, lowest rank first."""

    job_id: str
    ranks: tuple[JobSnapshot, ...]
    ended_at: float | None  # wall clock of an ended job's end (see _ended_at), else None

    @property
    def live(self) -> bool:
        return any(r.state in LIVE_STATES for r in self.ranks)

    @property
    def name(self) -> str:
        return self.ranks[0].name

    @property
    def state(self) -> str:
        """live, starting (no rank stepped yet, some still working), stalled (every running
        rank stalled), else the worst ended state."""
        states = {r.state for r in self.ranks}
        for state in ("live", "starting", "stalled"):
            if state in states:
                return state
        return next((s for s in ENDED_ORDER if s in states), "finished")

    @property
    def pids(self) -> frozenset[int]:
        return frozenset(r.pid for r in self.ranks)


def _key(job: JobSnapshot) -> str:
    return job.job_id or f"pid:{job.pid}"


def _ended_at(latest: Snapshot, ranks: Iterable[JobSnapshot]) -> float | None:
    """When the job ended (wall clock): its last rank's end as the collector settled it
    (``JobSnapshot.ended_at``); for a rank without one (a recording made before it), when its
    last step ended: the snapshot's time minus the age of that step; a rank that never stepped
    ended no later than it started.

    To ``END_DECIMALS`` decimals: the stamp and the age come from two clocks read a few
    milliseconds apart, so the difference moved every tick, and every verdict and row made
    of it had to be made again for each run a sweep left behind."""
    now = latest.timestamp
    ends = [
        r.ended_at if r.ended_at is not None
        else round(now - r.last_step_age_s, END_DECIMALS) if r.last_step_age_s is not None
        else r.started_at
        for r in ranks
    ]  # fmt: skip
    known = [t for t in ends if t is not None]
    return max(known) if known else None


END_DECIMALS = 1
"""An end time to a tenth of a second: shown to the minute, an age in 10 s steps."""


def _split_runs(ranks: Sequence[JobSnapshot]) -> list[list[JobSnapshot]]:
    """Ended segments of one key, oldest first; a repeated rank starts another run."""
    runs: list[list[JobSnapshot]] = []
    for rank in sorted(ranks, key=lambda r: (r.started_at or 0.0, r.rank)):
        if not runs or any(r.rank == rank.rank for r in runs[-1]):
            runs.append([])
        runs[-1].append(rank)
    return runs


def group_jobs(latest: Snapshot) -> tuple[JobGroup, ...]:
    """Every job in ``latest``: live ones first (in the order first seen), then ended ones,
    newest end first."""
    live: dict[str, list[JobSnapshot]] = {}
    ended: dict[str, list[JobSnapshot]] = {}
    for job in latest.jobs:
        (live if job.state in LIVE_STATES else ended).setdefault(_key(job), []).append(job)
    runs = {key: split_live(ranks) for key, ranks in live.items()}
    for key, split in runs.items():
        newest = split[0]
        newest += _same_run(latest, newest, ended.get(key, []))
        ended[key] = [r for r in ended.get(key, []) if r not in newest]
    groups = [
        JobGroup(key if i == 0 else f"{key}@{run[0].pid}", _by_rank(run), None)
        for key, split in runs.items()
        for i, run in enumerate(split)
    ]
    past = [
        JobGroup(key, _by_rank(run), _ended_at(latest, run))
        for key, runs in ended.items()
        for run in _split_runs(runs)
    ]
    past.sort(key=lambda g: g.ended_at or 0.0, reverse=True)
    return (*groups, *past)


def split_live(ranks: Sequence[JobSnapshot]) -> list[list[JobSnapshot]]:
    """Live ranks of one key as runs, newest first: each rank, newest first, joins the newest
    run that lacks its rank and whose ranks started within ``RUN_GAP_S`` of it."""
    runs: list[list[JobSnapshot]] = []
    for rank in sorted(ranks, key=lambda r: -(r.started_at or 0.0)):
        home = next((run for run in runs if _fits(run, rank)), None)
        if home is None:
            runs.append(home := [])
        home.append(rank)
    return runs


def _fits(run: list[JobSnapshot], rank: JobSnapshot) -> bool:
    if any(r.rank == rank.rank for r in run):
        return False
    start = rank.started_at or 0.0
    return all(abs((r.started_at or 0.0) - start) <= RUN_GAP_S for r in run)


def _same_run(
    latest: Snapshot, live: list[JobSnapshot], ended: list[JobSnapshot]
) -> list[JobSnapshot]:
    """Ended ranks of the live run itself (a rank that crashed while the others hang): a
    rank the live ranks lack, still stepping after the live run began.  Two runs cannot hold
    one rendezvous at once, so a lifetime that overlaps the live run's is the same run."""
    starts = [r.started_at for r in live if r.started_at is not None]
    if not starts:
        return []
    begun, present = min(starts), {r.rank for r in live}
    return [r for r in ended if r.rank not in present and (_ended_at(latest, [r]) or 0.0) >= begun]


def _by_rank(ranks: Iterable[JobSnapshot]) -> tuple[JobSnapshot, ...]:
    return tuple(sorted(ranks, key=lambda r: (r.rank, r.pid)))


# An ended rank's identity and how far it got.  The collector reads an ended segment to its end
# once and keeps that snapshot, moving only its age (traintop.collectors.jobs._aged), so these name
# its final numbers; comparing all 26 fields instead (120 step times among them) cost the panel and
# the verdicts about 6 µs per ended rank and tick, these 1 µs.
_SETTLED = attrgetter("pid", "started_at", "state", "steps_total", "lost_records")


def settled(ranks: Iterable[JobSnapshot]) -> tuple[tuple[object, ...], ...]:
    """What an ended run's ranks say, less the age of their last step: the only field the
    collector still moves once a run ended.  Equal keys mean the same final numbers, so what
    is made of them (a verdict, a folded row) can be kept, not redone on every tick for every
    run a sweep left behind."""
    return tuple(map(_SETTLED, ranks))
