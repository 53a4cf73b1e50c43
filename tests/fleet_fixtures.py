"""Prometheus answers made from real exporter output, for the fleet tests without a server.

Each "node" is an exporter scraped in-process; its samples get the labels Prometheus adds
(``instance``, and ``job`` handled as ``honor_labels`` would or would not), then are split into
the four answers :func:`traintop.fleet.build.build_fleet` reads.
"""

from __future__ import annotations

import re
from dataclasses import replace

from tests.snapshot_fixtures import ScriptedSource, ddp_job, ddp_rank, hung_job, machine
from tests.test_exporter import parse_openmetrics
from traintop.collectors.snapshot import Snapshot
from traintop.exporter.listen import ListenAddress
from traintop.exporter.published import Latest
from traintop.exporter.run import ExporterConfig, Publisher, build_metrics_app
from traintop.fleet.build import QUERIES, Answers, build_fleet
from traintop.fleet.model import FleetSnapshot
from traintop.pipeline.live import Pipeline

SCRAPE_JOB = "traintop"


def _selector(query: str) -> re.Pattern:
    """The ``__name__`` regex of a query, anchored as Prometheus anchors it."""
    return re.compile(re.search(r'__name__=~"(.*)"', query).group(1))


GPU_SERIES, JOB_SERIES = _selector(QUERIES["gpus"]), _selector(QUERIES["jobs"])
NOW = 1_750_000_100.0


def scrape(snapshots: list[Snapshot]) -> dict[str, list]:
    """The exporter's samples after publishing ``snapshots`` (text format, as Prometheus 2)."""
    latest = Latest()
    Pipeline(ScriptedSource(snapshots)).start(Publisher(latest))
    app = build_metrics_app(ExporterConfig(ListenAddress("127.0.0.1", 0)), latest)
    return parse_openmetrics(app.metrics("", "")[2].decode(), openmetrics=False)


def _stored(name: str, labels: dict, instance: str, honor_labels: bool) -> dict[str, str]:
    """The labels Prometheus stores: ours, ``instance``, and its ``job`` or our ``job``."""
    stored = {**labels, "__name__": name, "instance": instance}
    if not honor_labels and "job" in labels:
        stored["exported_job"] = stored.pop("job")
    if not stored.get("job"):
        stored["job"] = SCRAPE_JOB
    return stored


def answers(
    nodes: dict[str, list[Snapshot]],
    *,
    honor_labels: bool = True,
    down: tuple[str, ...] = (),
    now: float = NOW,
) -> Answers:
    """The four answers for exporters at ``nodes`` (instance -> its snapshots); ``down``
    instances failed their last scrape: Prometheus has only their old samples."""
    result = Answers([], [], [], [], now)
    for instance, snaps in nodes.items():
        if instance in down:  # the query is `up == 0`
            result.up.append(({"instance": instance, "job": SCRAPE_JOB}, 0.0))
        for name, samples in scrape(snaps).items():
            for s in samples:
                _sort(
                    result,
                    name,
                    _stored(name, s.labels, instance, honor_labels),
                    s.value,
                    instance in down,
                )
    return result


def _sort(result: Answers, name: str, labels: dict, value: float, down: bool) -> None:
    if name == "traintop_exporter_sample_timestamp_seconds":
        result.nodes.append(({k: v for k, v in labels.items() if k != "__name__"}, value))
    elif down:
        return  # staleness markers: an instant query no longer returns the node's series
    elif GPU_SERIES.fullmatch(name):
        result.gpus.append((labels, value))
    elif JOB_SERIES.fullmatch(name):
        result.jobs.append((labels, value))


def node(
    host: str, ranks: range, *, throttling: bool, slow: int | None, ticks: int = 6
) -> list[Snapshot]:
    """``ticks`` snapshots of one 4-GPU host running ``ranks`` of one 8-rank job."""
    snaps = []
    for tick in range(ticks):
        jobs = tuple(replace(ddp_rank(r, 8, tick, slow=slow), local_rank=r % 4) for r in ranks)
        snap = machine(gpus=4, throttling=throttling, jobs=jobs, tick=tick)
        snaps.append(
            replace(snap, host=replace(snap.host, hostname=host), timestamp=NOW - ticks + tick)
        )
    return snaps


def two_exporters(*, b_throttling: bool = True, slow: int | None = 6) -> dict[str, list[Snapshot]]:
    """An 8-rank job on two 4-GPU nodes; node-b's GPU 2 overheats, rank ``slow`` straggles."""
    return {
        "10.0.0.1:19400": node("node-a", range(0, 4), throttling=False, slow=slow),
        "10.0.0.2:19400": node("node-b", range(4, 8), throttling=b_throttling, slow=slow),
    }


def hung_nodes(
    waited_s: float = 72.0, *, world: int = 8, stuck: int = 5
) -> dict[str, list[Snapshot]]:
    """A ``world``-rank job on two nodes, half its ranks each, hung ``waited_s``: rank ``stuck``
    never reached all_reduce #1042, the others wait in it (tests/snapshot_fixtures.hung_job)."""
    half = world // 2
    job = hung_job(waited_s, world=world, stuck=stuck)
    ranks = [replace(r, local_rank=r.rank % half) for r in job]
    nodes = {}
    for instance, host, mine in (("10.0.0.1:19400", "node-a", ranks[:half]),
                                 ("10.0.0.2:19400", "node-b", ranks[half:])):  # fmt: skip
        snaps = [machine(gpus=half, throttling=False, jobs=tuple(mine), tick=t) for t in range(6)]
        nodes[instance] = [replace(s, host=replace(s.host, hostname=host),
                                   timestamp=NOW - 6 + i) for i, s in enumerate(snaps)]  # fmt: skip
    return nodes


LIVE_JOB, OLD_JOB = "run:tcp://10.0.0.7:29500/2", "run:tcp://10.0.0.7:29600/3"
OLD_END = NOW - 300.0


def beside_ended(ticks: int = 6, *, live: bool = True) -> dict[str, list[Snapshot]]:
    """One node: a 2-rank job running (unless not ``live``) beside a 3-rank one that crashed
    five minutes ago, at 26.7 steps/s before it did (what a dead job's last rate looks like)."""
    snaps = []
    for tick in range(ticks):
        running = ddp_job(world=2, tick=tick, slow=None) if live else ()
        old = ddp_job(world=3, tick=tick, name="old", state="crashed", job_id=OLD_JOB, slow=None)
        ended = tuple(replace(r, ended_at=OLD_END, last_step_age_s=300.0) for r in old)
        snap = machine(gpus=2, throttling=False, jobs=(*running, *ended), tick=tick)
        snaps.append(replace(snap, timestamp=NOW - ticks + tick))
    return {"10.0.0.1:19400": snaps}


def fleet(nodes, *, wanted=None, previous=None, **kwargs) -> FleetSnapshot:
    """The fleet snapshot ``traintop fleet`` would build from these exporters."""
    return build_fleet(
        answers(nodes, **kwargs), wanted=wanted, stale_after_s=30.0, source="http://prom:9090",
        previous=previous,
    )  # fmt: skip
