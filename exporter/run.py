"""``traintop exporter``: the pipeline samples and judges, the latest sample is served over HTTP.

Headless, the exporter samples every 5 s by default instead of the monitor's 1 s: Prometheus
scrapes every 15-60 s, so faster sampling would only be thrown away, and step rates come from
the rings' own timestamps, not from the sampling interval.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass

from prometheus_client.registry import CollectorRegistry

from traintop.collectors.snapshot import Snapshot
from traintop.diagnosis.verdict_runner import VerdictUpdate
from traintop.exporter.collector import SnapshotCollector
from traintop.exporter.ended import DEFAULT_KEEP_ENDED_S, EndedRuns
from traintop.exporter.listen import ListenAddress
from traintop.exporter.published import Latest, Published
from traintop.exporter.server import MetricsApp, bind
from traintop.exporter.verdicts import exported
from traintop.pipeline.live import Pipeline

DEFAULT_INTERVAL_S = 5.0


class ListenError(Exception):
    """The address cannot be served (port in use, unknown host, no permission)."""


@dataclass(frozen=True, slots=True)
class ExporterConfig:
    """What ``traintop exporter`` was asked for."""

    listen: ListenAddress
    interval_s: float = DEFAULT_INTERVAL_S
    host_metrics: bool = False
    version: str = "0+unknown"
    tls: tuple[str, str] | None = None  # certificate and key files: serve HTTPS
    keep_ended_s: float = DEFAULT_KEEP_ENDED_S  # how long an ended run's state is served


class Publisher:
    """What the pipeline delivers, as a scrape serves it: the snapshot, its verdicts, ended
    runs only for their grace period; then one reference swap."""

    def __init__(self, latest: Latest, keep_ended_s: float = DEFAULT_KEEP_ENDED_S) -> None:
        self._latest = latest
        self._ended = EndedRuns(keep_ended_s)
        self._versions = itertools.count()

    def __call__(self, snapshot: Snapshot, update: VerdictUpdate) -> None:
        verdict = update.verdict
        ranks = self._ended.ranks(snapshot)
        finals = self._ended.verdicts(verdict, snapshot.timestamp)
        version = next(self._versions)
        self._latest.put(Published(version, snapshot, exported(verdict), ranks, finals))


def build_metrics_app(config: ExporterConfig, latest: Latest) -> MetricsApp:
    """The WSGI app over a registry holding only our collector (no process/GC metrics of
    the default registry: they describe the exporter, not the GPUs or the job)."""
    registry = CollectorRegistry(auto_describe=False)
    collector = SnapshotCollector(latest, version=config.version, host_metrics=config.host_metrics)
    registry.register(collector)
    return MetricsApp(registry, latest)


def serve(config: ExporterConfig, pipeline: Pipeline) -> None:
    """Bind, start the pipeline, serve until interrupted (Ctrl+C or SIGTERM as
    KeyboardInterrupt)."""
    latest = Latest()
    app = build_metrics_app(config, latest)
    try:
        server = bind(config.listen, app, config.tls)
    except OSError as exc:
        where = config.listen.url(tls=config.tls is not None)
        raise ListenError(f"cannot serve {where}: {exc.strerror or exc}") from None
    publish = Publisher(latest, config.keep_ended_s)
    publish(*pipeline.tick())  # the first scrape already has data
    pipeline.start(publish)
    url = config.listen.url(server.server_address[1], tls=config.tls is not None)
    print(
        f"traintop exporter: serving {url}/metrics, sampling every {config.interval_s:g} s",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        pipeline.stop()
