"""The custom collector: formats the latest published snapshot, never samples.

``prometheus_client`` calls ``collect()`` on each scrape; all it does here is turn the
immutable :class:`~traintop.exporter.published.Published` value into metric families.  Sampling and
diagnosis already happened on the sampler thread.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from traintop.exporter.gpu_families import gpu_families
from traintop.exporter.host_families import host_families
from traintop.exporter.job_families import job_families
from traintop.exporter.published import Latest, Published
from traintop.exporter.verdict_families import (
    final_families,
    remedy_families,
    verdict_families,
)


class SnapshotCollector(Collector):
    """Everything the exporter publishes, read from ``latest`` at scrape time."""

    def __init__(self, latest: Latest, *, version: str, host_metrics: bool = False) -> None:
        self._latest = latest
        self._version = version
        self._host_metrics = host_metrics

    def collect(self) -> Iterator[Metric]:
        published = self._latest.get()
        if published is None:
            return
        yield from self._meta(published)
        yield from gpu_families(published.snapshot)
        host = published.snapshot.host.hostname
        yield from job_families(published.ranks, host)
        yield from verdict_families(published.verdicts, host)
        yield from remedy_families(published.verdicts, host)
        yield from final_families(published.finals, host)
        if self._host_metrics:
            yield from host_families(published.snapshot)

    def _meta(self, published: Published) -> Iterator[Metric]:
        """Who is exporting, when it last sampled (staleness), and what failed."""
        snap = published.snapshot
        info = InfoMetricFamily("traintop_exporter", "The exporter's version and host.")
        info.add_metric([], {"version": self._version, "hostname": snap.host.hostname})
        yield info
        stamp = GaugeMetricFamily(
            "traintop_exporter_sample_timestamp_seconds",
            "Wall-clock time of the sample being served, seconds since the epoch.",
            labels=("hostname",),
        )
        stamp.add_metric([snap.host.hostname], snap.timestamp)
        yield stamp
        yield GaugeMetricFamily(
            "traintop_exporter_sample_interval_seconds",
            "Seconds between samples.",
            value=snap.interval_s,
        )
        errors = GaugeMetricFamily(
            "traintop_exporter_collector_error",
            "1 for each collector that failed in the sample being served.",
            labels=("collector",),
        )
        for error in snap.errors:
            errors.add_metric([error.collector], 1.0)
        yield errors
