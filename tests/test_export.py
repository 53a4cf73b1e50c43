"""JSON export: the exact schema, decoded clock reasons, JSON-serialisability, two-sample rates."""

import json

import psutil

from traintop.collectors.export import snapshot_to_dict
from traintop.collectors.factory import build_collectors
from traintop.collectors.sampler import Sampler
from traintop.collectors.snapshot import (
    CollectorError,
    CpuCore,
    CpuSnapshot,
    GpuSnapshot,
    GpuStatus,
    HostInfo,
    Snapshot,
)
from traintop.pipeline.live import Pipeline

KEYS = {
    "timestamp", "host", "gpu_status", "gpus", "cpu", "memory",
    "disks", "nics", "processes", "process_total", "jobs", "errors",
}  # fmt: skip


class FakeGpu:
    def collect(self):
        gpu = GpuSnapshot(index=0, name="H100", clocks_event_reasons=0x4 | 0x40)
        return (gpu, GpuSnapshot(index=1)), GpuStatus(available=True)

    def close(self):
        pass


def _snapshot():
    core = CpuCore(index=0, busy_pct=12.5)
    return Snapshot(
        timestamp=1700000000.0,
        monotonic=5.0,
        interval_s=1.0,
        host=HostInfo("node", 10.0, 1),
        cpu=CpuSnapshot((core,), core, (0.1, 0.2, 0.3), None, None, 1),
        memory=None,
        disks=(),
        nics=(),
        gpus=FakeGpu().collect()[0],
        gpu_status=GpuStatus(available=True),
        processes=(),
        errors=(CollectorError("memory", "OSError: boom"),),
    )


def test_schema_and_units_in_key_names():
    data = snapshot_to_dict(_snapshot())
    assert set(data) == KEYS
    assert data["cpu"]["cores"][0]["busy_pct"] == 12.5
    assert data["memory"] is None
    assert data["errors"] == [{"collector": "memory", "message": "OSError: boom"}]
    assert data["gpus"][0]["clocks_event_reasons_active"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert data["gpus"][1]["clocks_event_reasons_active"] is None


def test_json_round_trip_is_strict():
    text = json.dumps(snapshot_to_dict(_snapshot()), allow_nan=False)
    assert json.loads(text)["host"]["hostname"] == "node"


def test_a_settled_snapshot_has_rates_from_real_collectors():
    collectors = build_collectors(gpu=FakeGpu())
    snap = Pipeline(Sampler(collectors), collectors=collectors).settled(settle_s=0.1)
    data = json.loads(json.dumps(snapshot_to_dict(snap), allow_nan=False))
    assert set(data) == KEYS
    assert data["cpu"]["total"]["busy_pct"] is not None
    # A real scan of this machine: every process, give or take those that came or went since.
    assert abs(data["process_total"] - len(psutil.pids())) <= 5
    assert all(nic["rx_bytes_per_s"] is not None for nic in data["nics"])
    assert data["gpus"][0]["name"] == "H100"
