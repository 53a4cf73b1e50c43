"""``traintop snapshot --json``: one snapshot as plain JSON-ready data.

Field names are the dataclass field names, which already carry their units
(``mem_used_bytes``, ``read_bytes_per_s``), so scripts never have to guess a unit.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from traintop.collectors.gpu_reasons import decode_reasons
from traintop.collectors.snapshot import GpuSnapshot, Snapshot


def snapshot_to_dict(snapshot: Snapshot) -> dict[str, Any]:
    """The export schema: exactly these top-level keys, values in base units."""
    return {
        "timestamp": snapshot.timestamp,
        "host": asdict(snapshot.host),
        "gpu_status": asdict(snapshot.gpu_status),
        "gpus": [_gpu_dict(gpu) for gpu in snapshot.gpus],
        "cpu": None if snapshot.cpu is None else asdict(snapshot.cpu),
        "memory": None if snapshot.memory is None else asdict(snapshot.memory),
        "disks": [asdict(disk) for disk in snapshot.disks],
        "nics": [asdict(nic) for nic in snapshot.nics],
        "processes": [asdict(proc) for proc in snapshot.processes],
        "process_total": snapshot.process_total,  # every process scanned, not only those listed
        "jobs": [asdict(job) for job in snapshot.jobs],
        "errors": [asdict(error) for error in snapshot.errors],
    }


def _gpu_dict(gpu: GpuSnapshot) -> dict[str, Any]:
    """A GPU entry, with the clocks-event mask decoded next to it for readers without NVML docs."""
    entry = asdict(gpu)
    mask = gpu.clocks_event_reasons
    entry["clocks_event_reasons_active"] = (
        None if mask is None else [reason.key for reason in decode_reasons(mask)]
    )
    return entry
