"""Ended runs on a scrape: their state and end for a grace period, then nothing.

Prometheus' convention is that a series about something that stopped existing stops being
exported, and goes stale: an ended rank's last rate served as a current gauge reads as a running
job in every ``sum()`` and low-rate alert.  So rates, shares and quantiles are served for running
ranks only; an ended rank keeps its state (a crash alert fires on it) and gains its end time for
``keep_ended_s`` after it ended, and an ended job's last verdict is served under its own name;
then all of it goes.  What is kept here outlives the rank's segment, which any monitor of the
user removes ten minutes after it went quiet, so the grace period holds whatever the cleaner does.
One label set is one series: a rank restarted under the same job id and rank is served as the
running one, and of two ended runs with one label set the newer is kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

from traintop.collectors.snapshot import JobSnapshot, Snapshot
from traintop.diagnosis.api import Verdict
from traintop.diagnosis.model import LIVE_STATES
from traintop.exporter.defaults import DEFAULT_KEEP_ENDED_S
from traintop.exporter.job_families import rank_labels
from traintop.exporter.published import ExportedVerdict, ServedRanks

T = TypeVar("T")


Key = tuple[str, ...]


class Kept(Generic[T]):
    """Ended items by key, each with its end, served until ``keep_s`` after that end."""

    def __init__(self, keep_s: float) -> None:
        self._keep_s = keep_s
        self._items: dict[Key, tuple[float, T]] = {}

    def update(
        self, now: float, ended: Iterable[tuple[Key, float, T]], running: set[Key]
    ) -> tuple[T, ...]:
        """Take this sample's ended items (the newest end wins a key), drop those a running
        item's key now names or whose grace period is over; what is left, by key."""
        items = self._items
        for key, end, item in ended:
            held = items.get(key)
            if held is None or end >= held[0]:
                items[key] = (end, item)
        for key in [k for k, (end, _) in items.items() if k in running or now - end > self._keep_s]:
            del items[key]
        return tuple(item for _, (_, item) in sorted(items.items(), key=_by_key))


def _by_key(entry: tuple[Key, object]) -> Key:
    return entry[0]


def end_of(job: JobSnapshot, now: float) -> float:
    """When an ended rank ended: as the collector settled it, else (a snapshot made before
    ``ended_at`` existed) when its last step ended, else now."""
    if job.ended_at is not None:
        return job.ended_at
    return now - job.last_step_age_s if job.last_step_age_s is not None else now


class EndedRuns:
    """The grace period's memory, fed one sample at a time on the sampler thread."""

    def __init__(self, keep_s: float = DEFAULT_KEEP_ENDED_S) -> None:
        self._ranks: Kept[JobSnapshot] = Kept(keep_s)
        self._verdicts: Kept[ExportedVerdict] = Kept(keep_s)

    def ranks(self, snapshot: Snapshot) -> ServedRanks:
        """The running ranks, and the ranks that ended within the grace period."""
        host, now = snapshot.host.hostname, snapshot.timestamp
        live = tuple(j for j in snapshot.jobs if j.state in LIVE_STATES)
        ended = (
            (tuple(rank_labels(j, host)), end_of(j, now), j)
            for j in snapshot.jobs
            if j.state not in LIVE_STATES
        )
        running = {tuple(rank_labels(j, host)) for j in live}
        return ServedRanks(live, self._ranks.update(now, ended, running))

    def verdicts(self, verdict: Verdict, now: float) -> tuple[ExportedVerdict, ...]:
        """Each ended job's last verdict, within the grace period (none for a job id that runs
        again)."""
        ended = (
            ((v.job_id, v.name), v.ended_at if v.ended_at is not None else now,
             ExportedVerdict(v.job_id, v.name, v.primary, None))
            for v in verdict.per_job
            if not v.live
        )  # fmt: skip
        running = {(v.job_id, v.name) for v in verdict.per_job if v.live}
        return self._verdicts.update(now, ended, running)
