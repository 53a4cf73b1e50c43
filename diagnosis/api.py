"""The public surface of the diagnosis package, in one import for the CLI and the UI."""

from traintop.diagnosis.engine import diagnose
from traintop.diagnosis.export import verdict_to_dict
from traintop.diagnosis.model import (
    BOTTLENECKS,
    Evidence,
    Finding,
    Gain,
    JobSummary,
    JobVerdict,
    Straggler,
    Verdict,
)
from traintop.diagnosis.stabilizer import VerdictStabilizer
from traintop.diagnosis.verdict_window import VerdictWindow

__all__ = [
    "BOTTLENECKS",
    "Evidence",
    "Finding",
    "Gain",
    "JobSummary",
    "JobVerdict",
    "Straggler",
    "Verdict",
    "VerdictStabilizer",
    "VerdictWindow",
    "diagnose",
    "verdict_to_dict",
]
