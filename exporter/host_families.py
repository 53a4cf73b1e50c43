"""Host CPU, memory, disk and NIC metrics, only with ``--host-metrics``.

node-exporter already covers the host on every cluster that runs Prometheus; exporting it
twice doubles series for nothing.  These are here for hosts without it, as the same
per-interval rates the monitor shows (node-exporter exports counters instead).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from traintop.collectors.snapshot import Snapshot

Field = tuple[str, str, Callable[[Any], float | None]]

DISK_FIELDS: tuple[Field, ...] = (
    (
        "traintop_host_disk_read_bytes_per_second",
        "Bytes read per second.",
        lambda d: d.read_bytes_per_s,
    ),
    (
        "traintop_host_disk_write_bytes_per_second",
        "Bytes written per second.",
        lambda d: d.write_bytes_per_s,
    ),
    ("traintop_host_disk_busy_percent", "Time the device was busy (in %).", lambda d: d.busy_pct),
)
NIC_FIELDS: tuple[Field, ...] = (
    (
        "traintop_host_network_receive_bytes_per_second",
        "Bytes received per second.",
        lambda n: n.rx_bytes_per_s,
    ),
    (
        "traintop_host_network_transmit_bytes_per_second",
        "Bytes sent per second.",
        lambda n: n.tx_bytes_per_s,
    ),
    (
        "traintop_host_network_link_util_percent",
        "Busier direction against link speed (in %).",
        lambda n: n.link_util_pct,
    ),
)


def _per_device(
    rows: Sequence[Any], fields: tuple[Field, ...], host: str
) -> Iterator[GaugeMetricFamily]:
    for name, doc, read in fields:
        family = GaugeMetricFamily(name, doc, labels=("device", "hostname"))
        for row in rows:
            value = read(row)
            if value is not None:
                family.add_metric([row.name, host], value)
        yield family


def _cpu(snapshot: Snapshot) -> Iterator[GaugeMetricFamily]:
    family = GaugeMetricFamily(
        "traintop_host_cpu_busy_percent",
        "Busy share of each logical CPU (in %).",
        labels=("cpu", "hostname"),
    )
    cores = snapshot.cpu.cores if snapshot.cpu else ()
    for core in cores:
        if core.busy_pct is not None:
            family.add_metric([str(core.index), snapshot.host.hostname], core.busy_pct)
    yield family


def _memory(snapshot: Snapshot) -> Iterator[GaugeMetricFamily]:
    family = GaugeMetricFamily(
        "traintop_host_memory_available_bytes",
        "RAM available without swapping.",
        labels=("hostname",),
    )
    if snapshot.memory is not None:
        family.add_metric([snapshot.host.hostname], snapshot.memory.available_bytes)
    yield family


def host_families(snapshot: Snapshot) -> Iterator[GaugeMetricFamily]:
    """CPU per core, available memory, and per-device disk and NIC rates."""
    host = snapshot.host.hostname
    yield from _cpu(snapshot)
    yield from _memory(snapshot)
    yield from _per_device(snapshot.disks, DISK_FIELDS, host)
    yield from _per_device(snapshot.nics, NIC_FIELDS, host)
