"""GPU metrics under dcgm-exporter's names, units and labels, so its dashboards work unchanged.

Names and units follow dcgm-exporter's counters file (``etc/default-counters.csv``) and DCGM's
field names; ``tests/exporter_fixtures/dcgm_fields.txt`` keeps the list we rely on, with its
source.  Two deliberate differences: everything here is a gauge, because the PCIe
"throughput" fields are NVML rates in KB/s (dcgm-exporter declares them counters, which under
OpenMetrics would force a ``_total`` suffix and break the names), and a reading NVML does not
support is left out, as dcgm-exporter leaves out blank fields, never exported as 0.  The
profiling fields (``DCGM_FI_PROF_*``) are ratios 0-1, as DCGM gives them; traintop reads them
from NVML GPM on Hopper and newer, so an older GPU has none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily

from traintop.collectors.snapshot import GpuSnapshot, Snapshot

GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname")
MIB = 1024 * 1024
KIB = 1024


@dataclass(frozen=True, slots=True)
class GpuMetric:
    """One exported GPU field: its DCGM name, help text and how to read it from a snapshot."""

    name: str
    help: str
    read: Callable[[GpuSnapshot], float | None]


def _scaled(value: float | None, unit: float) -> float | None:
    return None if value is None else value / unit


def _ratio(pct: float | None) -> float | None:
    return _scaled(pct, 100.0)


GPU_METRICS: tuple[GpuMetric, ...] = (
    GpuMetric("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g.util_gpu_pct),
    GpuMetric("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda g: g.util_mem_pct),
    GpuMetric(
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        lambda g: _scaled(g.mem_used_bytes, MIB),
    ),
    GpuMetric(
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        lambda g: _scaled(g.mem_free_bytes, MIB),
    ),
    GpuMetric(
        "DCGM_FI_DEV_FB_TOTAL",
        "Total framebuffer memory (in MiB).",
        lambda g: _scaled(g.mem_total_bytes, MIB),
    ),
    GpuMetric("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g.temp_c),
    GpuMetric(
        "DCGM_FI_DEV_SLOWDOWN_TEMP", "Slowdown temperature (in C).", lambda g: g.temp_slowdown_c
    ),
    GpuMetric("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: g.power_w),
    GpuMetric("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power limit (in W).", lambda g: g.power_limit_w),
    GpuMetric("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz),
    GpuMetric(
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        "Maximum SM clock frequency (in MHz).",
        lambda g: g.sm_clock_max_mhz,
    ),
    GpuMetric(
        "DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda g: g.mem_clock_mhz
    ),
    GpuMetric(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "Current clock event reasons (bitmask of NVML clocks event reasons).",
        lambda g: g.clocks_event_reasons,
    ),
    GpuMetric(
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "PCIe TX throughput (in KB/s) via NVML.",
        lambda g: _scaled(g.pcie_tx_bytes_per_s, KIB),
    ),
    GpuMetric(
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "PCIe RX throughput (in KB/s) via NVML.",
        lambda g: _scaled(g.pcie_rx_bytes_per_s, KIB),
    ),
    GpuMetric(
        "DCGM_FI_PROF_SM_ACTIVE",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        lambda g: _ratio(g.sm_active_pct),
    ),
    GpuMetric(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "The ratio of number of warps resident on an SM.",
        lambda g: _ratio(g.sm_occupancy_pct),
    ),
    GpuMetric(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles any tensor pipe is active.",
        lambda g: _ratio(g.tensor_active_pct),
    ),
    GpuMetric(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        lambda g: _ratio(g.dram_active_pct),
    ),
)


def gpu_labels(gpu: GpuSnapshot, hostname: str) -> list[str]:
    """dcgm-exporter's label values: ``device`` is the /dev node name, nvidia<index>."""
    return [
        str(gpu.index),
        gpu.uuid or "",
        gpu.pci_bus_id or "",
        f"nvidia{gpu.index}",
        gpu.name or "",
        hostname,
    ]


def gpu_families(snapshot: Snapshot) -> Iterator[GaugeMetricFamily]:
    """One family per field, one sample per GPU that reports it; a lost GPU only as lost."""
    labelled = [(g, gpu_labels(g, snapshot.host.hostname)) for g in snapshot.gpus]
    live = [(g, labels) for g, labels in labelled if not g.lost]
    for metric in GPU_METRICS:
        family = GaugeMetricFamily(metric.name, metric.help, labels=GPU_LABELS)
        for gpu, labels in live:
            value = metric.read(gpu)
            if value is not None:
                family.add_metric(labels, float(value))
        yield family
    lost = GaugeMetricFamily(
        "traintop_gpu_lost",
        "1 while NVML reports the GPU lost (fell off the bus).",
        labels=GPU_LABELS,
    )
    for gpu, labels in labelled:
        lost.add_metric(labels, 1.0 if gpu.lost else 0.0)
    yield lost
