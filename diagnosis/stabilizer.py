"""Hysteresis for the verdicts: a new primary must hold before it replaces the old one.

Per-window verdicts can flip between two close findings on noisy samples (data_cpu on one
tick, data_io on the next).  A banner that flickers is worse than one a few seconds late, so
a challenger must win every window for ``switch_after_s`` before it is shown.  This holds for
each job's own verdict and for the choice of which job the banner is about (two jobs losing
about the same share must not take turns).  A job that ends keeps, in the past tense, the
verdict that was shown longest while it ran (``diagnosis/life_tally.py``): that is its final
word, better informed (host, GPU and process evidence) than its ring numbers alone, and not a
reading of its last seconds.  Time comes from the snapshots' monotonic stamps, so tests and
replays are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from traintop.collectors.snapshot import Snapshot
from traintop.diagnosis.engine import NO_LIVE_JOB, diagnose, no_live_job
from traintop.diagnosis.life_tally import Life, LifeTally
from traintop.diagnosis.memo import Memo
from traintop.diagnosis.model import Evidence, Finding, JobVerdict, Verdict
from traintop.diagnosis.run_life import how
from traintop.diagnosis.tense import past
from traintop.diagnosis.text import duration

HANG = "hang"
MAX_ENDED = 64  # final verdicts remembered (ring segments are collected after 10 min anyway)


class _Hold:
    """One shown key (a bottleneck, or a job id) and the challenger waiting to replace it."""

    def __init__(self, switch_after_s: float) -> None:
        self.switch_after_s = switch_after_s
        self.shown: str | None = None
        self.shown_since = 0.0
        self.finding: Finding | None = None
        self._challenger: str | None = None
        self._challenger_since = 0.0

    def offer(self, key: str, now: float, *, at_once: bool = False) -> str:
        """The key to show after ``key`` won this window; ``at_once`` adopts it now."""
        if at_once or self.shown is None or key == self.shown:
            self._adopt(key, now if key != self.shown else self.shown_since)
        elif self._challenger != key:
            self._challenger, self._challenger_since = key, now
        elif now - self._challenger_since >= self.switch_after_s:
            self._adopt(key, self._challenger_since)
        return self.shown or key

    def _adopt(self, key: str, since: float) -> None:
        self.shown, self.shown_since, self._challenger = key, since, None


def _hold_findings(
    hold: _Hold, primary: Finding, also: tuple[Finding, ...], now: float
) -> tuple[Finding, tuple[Finding, ...]]:
    """Keep the shown bottleneck as primary, with this window's evidence when it still holds;
    the fresh winner is listed first in ``also`` while it waits its turn."""
    fresh = primary.bottleneck
    # A stopped job is a fact, not a reading that may flicker: shown, and cleared, at once.
    at_once = hold.shown in (None, "unknown", HANG) or fresh == HANG
    shown = hold.offer(fresh, now, at_once=at_once)
    if shown == fresh:
        hold.finding = primary
        return primary, also
    current = next((f for f in also if f.bottleneck == shown), hold.finding or primary)
    hold.finding = current
    return current, (primary, *(f for f in also if f.bottleneck != shown))


class VerdictStabilizer:
    """Feed it the current window on every tick; it returns the verdict to display."""

    def __init__(self, min_window_s: float = 3.0, switch_after_s: float = 3.0) -> None:
        if min_window_s < 0 or switch_after_s < 0:
            raise ValueError("min_window_s and switch_after_s must be >= 0")
        self.min_window_s = min_window_s
        self.switch_after_s = switch_after_s
        self._top = _Hold(switch_after_s)
        self._focus = _Hold(switch_after_s)
        self._jobs: dict[str, _Hold] = {}
        self._shown_jobs: dict[frozenset[int], JobVerdict] = {}
        self._tally = LifeTally()  # what each run's shown verdict was, for how long
        self._memo = Memo()  # the work one window shares with the next (traintop.diagnosis.memo)

    def update(self, window: Sequence[Snapshot], *, job_pid: int | None = None) -> Verdict:
        """Diagnose ``window`` (for ``job_pid``, as :func:`diagnose`) and return the stabilised
        verdict with ``since_s`` filled in, for the primary and for every job."""
        fresh = diagnose(window, job_pid=job_pid, min_window_s=self.min_window_s, memo=self._memo)
        now = max((s.monotonic for s in window), default=0.0)
        per_job = tuple(self._job(v, now, window) for v in fresh.per_job)
        live = {v.job_id for v in per_job if v.live}
        self._jobs = {k: hold for k, hold in self._jobs.items() if k in live}
        if fresh.job_id is None:
            return self._box(fresh, per_job, now)
        return self._about_job(fresh, per_job, now, job_pid)

    def _job(self, verdict: JobVerdict, now: float, window: Sequence[Snapshot]) -> JobVerdict:
        """A live job's verdict held per job; an ended one's last shown verdict, past tense."""
        key = _ranks_key(verdict)
        if not verdict.live:
            return self._final(verdict, key, window)
        hold = self._jobs.setdefault(verdict.job_id, _Hold(self.switch_after_s))
        primary, also = _hold_findings(hold, verdict.primary, verdict.also, now)
        shown = replace(verdict, primary=primary, also=also, since_s=now - hold.shown_since)
        self._remember(key, shown)
        self._tally.add(key, primary, now)
        return shown

    def _remember(self, key: frozenset[int], shown: JobVerdict) -> None:
        self._shown_jobs.pop(key, None)
        self._shown_jobs[key] = shown
        while len(self._shown_jobs) > MAX_ENDED:
            self._shown_jobs.pop(next(iter(self._shown_jobs)))

    def _final(
        self, verdict: JobVerdict, key: frozenset[int], window: Sequence[Snapshot]
    ) -> JobVerdict:
        """What explained most of the job's time while it ran, in the past tense (host evidence
        included), with how it ended first; the engine's ring-only verdict when it was never
        judged running, or when a rank failed in its collectives (a hang's post-mortem: that
        is why it ended; what it was before comes after)."""
        life = self._tally.life(key)
        if life is None:
            return verdict
        now = max((s.timestamp for s in window), default=0.0)
        said = tuple(e for e in verdict.primary.evidence if e.metric == "ending")
        facts = (*said, _held(life))
        ended = past(life.finding, verdict.state, verdict.ended_at, now,
                     how=how(verdict.ending), facts=facts)  # fmt: skip
        last = self._shown_jobs.get(key)
        straggler = last.straggler if last is not None else None
        if verdict.hang is not None:
            return replace(verdict, also=(ended,), straggler=straggler)
        return replace(verdict, primary=ended, also=(), straggler=straggler)

    def _about_job(
        self, fresh: Verdict, per_job: tuple[JobVerdict, ...], now: float, job_pid: int | None
    ) -> Verdict:
        """The primary follows one job: the one asked for, else the worst live one, whose
        choice is held like a bottleneck (two jobs losing about as much do not take turns)."""
        focus = self._focus_job(fresh, per_job, now, job_pid)
        jobs = fresh.jobs if focus.job_id == fresh.job_id else focus.ranks
        return replace(
            fresh,
            primary=focus.primary,
            also=focus.also,
            since_s=focus.since_s if focus.live else None,
            jobs=jobs,
            per_job=(focus, *(v for v in per_job if v is not focus)),
            job_id=focus.job_id,
        )

    def _focus_job(
        self, fresh: Verdict, per_job: tuple[JobVerdict, ...], now: float, job_pid: int | None
    ) -> JobVerdict:
        if job_pid is not None:
            return next(v for v in per_job if any(r.pid == job_pid for r in v.ranks))
        live = {v.job_id: v for v in per_job if v.live}
        focus = live.get(fresh.job_id or "")
        hung = focus is not None and focus.hang is not None
        at_once = self._focus.shown not in live or hung
        shown = self._focus.offer(fresh.job_id or "", now, at_once=at_once)
        return live[shown]

    def _box(self, fresh: Verdict, per_job: tuple[JobVerdict, ...], now: float) -> Verdict:
        """No live attached job: the machine's verdict, held; data running out resets it."""
        self._focus.shown = None
        if fresh.primary.bottleneck == "unknown":
            self._jobs.clear()  # data ran out (window emptied, clock reset): start over
            self._top.offer("unknown", now, at_once=True)
            self._top.finding = primary = _restated(fresh.primary, per_job)
            return replace(fresh, primary=primary, per_job=per_job, since_s=0.0)
        primary, also = _hold_findings(self._top, fresh.primary, fresh.also, now)
        since = now - self._top.shown_since
        return replace(fresh, primary=primary, also=also, since_s=since, per_job=per_job)


def _restated(primary: Finding, per_job: tuple[JobVerdict, ...]) -> Finding:
    """ "no live training job; <the newest ended run's final word>", with that word as this
    stabilizer says it (what the run was for most of its life), not the engine's reading."""
    if not primary.summary.startswith(NO_LIVE_JOB):
        return primary
    return replace(primary, summary=no_live_job(per_job))


def _held(life: Life) -> Evidence:
    """ "compute for 4m10s of the 4m30s it was watched running"."""
    text = (
        f"{life.finding.bottleneck} for {duration(life.seconds)} of the "
        f"{duration(life.total_s)} it was watched running"
    )
    return Evidence(text, "verdict_held_s", life.seconds, "training")


def _ranks_key(verdict: JobVerdict) -> frozenset[int]:
    """A run's identity across its life: its ranks' pids (a job id can be reused by the next
    run on the same rendezvous address)."""
    return frozenset(r.pid for r in verdict.ranks)
