"""The verdict as a metric: ``traintop_bottleneck{job, bottleneck, severity}`` = confidence.

Only the primary finding is exported, one series per job, so a Grafana state timeline of the
``bottleneck`` label is the verdict's history and an alert is one comparison.  The summary text
stays out of the labels: it holds numbers, and a label that changes every sample would make a
new series every sample.  A job that ended has no current bottleneck: its last verdict is
``traintop_final_bottleneck``, for the grace period, so an alert or a state timeline of the
current one never reads a dead job, and ``traintop fleet`` can say what held it back at its end.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily

from traintop.diagnosis.api import BOTTLENECKS
from traintop.exporter.published import ExportedVerdict

VERDICT_LABELS = ("job", "job_name", "hostname", "bottleneck", "severity")
# The label's values are the CLI contract's ids: a query or alert can be written against them.
BOTTLENECK_HELP = (
    "The job's current bottleneck on this host (bottleneck: "
    + ", ".join(BOTTLENECKS)
    + "); the value is the confidence (0-1)."
)
JOB_LABELS = ("job", "job_name", "hostname")


def verdict_families(
    verdicts: tuple[ExportedVerdict, ...], hostname: str
) -> Iterator[GaugeMetricFamily]:
    """The bottleneck with its confidence, and how long it has held."""
    primary = GaugeMetricFamily("traintop_bottleneck", BOTTLENECK_HELP, labels=VERDICT_LABELS)
    since = GaugeMetricFamily(
        "traintop_bottleneck_since_seconds",
        "Seconds the current bottleneck has held.",
        labels=JOB_LABELS,
    )
    for item in verdicts:
        finding = item.finding
        labels = [item.job, item.job_name, hostname]
        primary.add_metric([*labels, finding.bottleneck, finding.severity], finding.confidence)
        if item.since_s is not None:
            since.add_metric(labels, item.since_s)
    yield primary
    yield since


def final_families(
    finals: tuple[ExportedVerdict, ...], hostname: str
) -> Iterator[GaugeMetricFamily]:
    """Each job that ended within the grace period: its last bottleneck, with its confidence."""
    family = GaugeMetricFamily(
        "traintop_final_bottleneck",
        "An ended job's last bottleneck on this host (served for --keep-ended); the value is "
        "the confidence (0-1).",
        labels=VERDICT_LABELS,
    )
    for item in finals:
        finding = item.finding
        labels = [item.job, item.job_name, hostname, finding.bottleneck, finding.severity]
        family.add_metric(labels, finding.confidence)
    yield family
