"""The one value the sampler thread hands to scrapes: a snapshot and its per-job verdicts.

The sampler replaces it whole (one reference assignment, atomic under the GIL); a scrape reads
the reference once and formats what it got.  Nothing is shared that either side mutates, so a
slow or stuck scraper holds no lock the sampler could wait on.
"""

from __future__ import annotations

from dataclasses import dataclass

from traintop.collectors.snapshot import JobSnapshot, Snapshot
from traintop.diagnosis.api import Finding


@dataclass(frozen=True, slots=True)
class ExportedVerdict:
    """One job's stabilised verdict on this host (``job`` is its ``job_id``; "" the host's)."""

    job: str
    job_name: str
    finding: Finding
    since_s: float | None


@dataclass(frozen=True, slots=True)
class ServedRanks:
    """The ranks a scrape describes: ``live`` (running, stalled ones too) with every series,
    ``ended`` (within the grace period, see ``exporter/ended.py``) with state and end only."""

    live: tuple[JobSnapshot, ...]
    ended: tuple[JobSnapshot, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Published:
    """What a scrape formats; ``version`` grows by one per sample so output can be cached.

    ``verdicts``: one per running job (else the host's); ``finals``: the last verdict of each
    job that ended within the grace period."""

    version: int
    snapshot: Snapshot
    verdicts: tuple[ExportedVerdict, ...]
    ranks: ServedRanks
    finals: tuple[ExportedVerdict, ...]


class Latest:
    """Holds the newest :class:`Published`."""

    def __init__(self) -> None:
        self._value: Published | None = None

    def put(self, value: Published) -> None:
        """Publish ``value`` (sampler thread)."""
        self._value = value

    def get(self) -> Published | None:
        """The newest value, or None before the first sample (any thread)."""
        return self._value
