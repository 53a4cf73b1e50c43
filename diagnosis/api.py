"""The public surface of the diagnosis package, in one import for the CLI and the UI."""

from diagnosis.engine import diagnose
from diagnosis.export import verdict_to_dict
from diagnosis.model import BOTTLENECKS, Evidence, Finding, JobSummary, Verdict
from diagnosis.stabilizer import VerdictStabilizer

__all__ = [
    "BOTTLENECKS",
    "Evidence",
    "Finding",
    "JobSummary",
    "Verdict",
    "VerdictStabilizer",
    "diagnose",
    "verdict_to_dict",
]
