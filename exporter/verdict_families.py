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
from traintop.diagnosis.gain_text import has_figure
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


REMEDY_LABELS = (*JOB_LABELS, "bottleneck", "rank", "change", "bound_by", "kind")
REMEDIES_EXPORTED = 3  # the best few: each is a series, and the labels name the change
REMEDY_HELP = (
    "What the verdict's remedies are predicted to buy, best first (rank 1..3): steps/s after "
    "the change over steps/s now; kind=figure a prediction, kind=bound the most it can buy "
    "(remedies with neither are not exported); change names the setting, bound_by what "
    "limits the job then."
)


def remedy_families(
    verdicts: tuple[ExportedVerdict, ...], hostname: str
) -> Iterator[GaugeMetricFamily]:
    """``traintop_remedy_expected_speedup``: each verdict's best remedies with their gain."""
    family = GaugeMetricFamily("traintop_remedy_expected_speedup", REMEDY_HELP,
                               labels=REMEDY_LABELS)  # fmt: skip
    for item in verdicts:
        finding = item.finding
        for rank, remedy in enumerate(finding.remedies[:REMEDIES_EXPORTED], 1):
            gain = finding.gain_of(remedy)
            if gain is None or not has_figure(gain):
                continue
            kind = "figure" if gain.speedup is not None else "bound"
            labels = [item.job, item.job_name, hostname, finding.bottleneck, str(rank),
                      gain.change or remedy, gain.bound_by or "", kind]  # fmt: skip
            family.add_metric(labels, gain.speedup or gain.high or 1.0)
    yield family


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
