"""The verdicts a scrape serves, computed on the sampler thread so a scrape only formats them.

The diagnosis judges every job on the host (all its ranks here folded into one finding, held
per job against flicker, as `traintop diagnose` does); the exporter serves one verdict per live
job.  With no live job the host itself is judged (``job=""``): a throttled GPU is worth an
alert before anything runs on it.
"""

from __future__ import annotations

from traintop.diagnosis.api import Verdict
from traintop.exporter.published import ExportedVerdict

HOST = ""  # the ``job`` label of the host-wide verdict


def exported(verdict: Verdict) -> tuple[ExportedVerdict, ...]:
    """One verdict per live job, else the host's (an engine error is an ``unknown`` host
    verdict: exporting goes on)."""
    jobs = tuple(
        ExportedVerdict(v.job_id, v.name, v.primary, v.since_s) for v in verdict.per_job if v.live
    )
    return jobs or (ExportedVerdict(HOST, "", verdict.primary, verdict.since_s),)
