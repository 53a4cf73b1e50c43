"""Recordings built from scripted snapshots and verdicts, for the store, replay and export tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from traintop.collectors.snapshot import Snapshot
from traintop.diagnosis.model import Evidence, Finding, Verdict
from traintop.store.writer import Recorder


def verdict(bottleneck: str, summary: str | None = None) -> Verdict:
    text = summary or f"{bottleneck} holds"
    evidence = (Evidence(f"evidence for {bottleneck}", "m", 1.0, "gpu"),)
    finding = Finding(bottleneck, 0.9, "warning", text, evidence, ("fix it",))
    return Verdict(finding, (), "attach", 10.0, 5.0)


def record(path: Path, snapshots: Sequence[Snapshot], verdicts: Sequence[Verdict | None]) -> Path:
    """Write ``snapshots`` with their ``verdicts`` through the real recorder."""
    recorder = Recorder(path)
    for snapshot, v in zip(snapshots, verdicts, strict=True):
        recorder.add_sample(snapshot, v)
    recorder.stop()
    assert recorder.error is None, recorder.error
    return path
