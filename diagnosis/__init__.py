"""Name the bottleneck: pure functions over windows of snapshots (no I/O, no UI)."""

from diagnosis.api import (
    BOTTLENECKS,
    Evidence,
    Finding,
    Verdict,
    VerdictStabilizer,
    diagnose,
    verdict_to_dict,
)

__all__ = [
    "BOTTLENECKS",
    "Evidence",
    "Finding",
    "Verdict",
    "VerdictStabilizer",
    "diagnose",
    "verdict_to_dict",
]
