"""The public surface of the diagnosis package, in one import for the CLI and the UI."""

from diagnosis.engine import diagnose
from diagnosis.export import verdict_to_dict
from diagnosis.model import (
    BOTTLENECKS,
    Evidence,
    Finding,
    JobSummary,
    JobVerdict,
    Straggler,
    Verdict,
)
from diagnosis.stabilizer import VerdictStabilizer
from diagnosis.verdict_window import VerdictWindow

__all__ = [
    "BOTTLENECKS",
    "Evidence",
    "Finding",
    "JobSummary",
    "JobVerdict",
    "Straggler",
    "Verdict",
    "VerdictStabilizer",
    "VerdictWindow",
    "diagnose",
    "verdict_to_dict",
]
