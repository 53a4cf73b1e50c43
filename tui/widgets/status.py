"""The status line above the footer: collector errors first, then NVML state, then counts.

A monitor that silently shows stale or missing numbers misleads; this line says which
collector failed this tick and why, in the warning colour.
"""

from __future__ import annotations

from textual.content import Content

from traintop.collectors.snapshot import Snapshot
from traintop.tui.widgets.panel import LineWidget


class StatusLine(LineWidget):
    """One line, repainted only when its text changes."""

    def show(self, snapshot: Snapshot) -> None:
        content = status_text(snapshot)
        self.set_lines([content])


def status_text(snapshot: Snapshot) -> Content:
    """Errors and lost GPUs in warning colour, else driver facts in dim text."""
    problems = [f"{error.collector}: {error.message}" for error in snapshot.errors]
    problems += [
        f"gpu {gpu.index}: lost ({gpu.error or 'fallen off the bus'})"
        for gpu in snapshot.gpus
        if gpu.lost
    ]
    status = snapshot.gpu_status
    if not status.available:
        problems.append(f"gpu: {status.message or 'NVML unavailable'}")
    if problems:
        return Content.styled(" · ".join(problems), "bold $warning")
    facts = []
    if status.driver_version:
        facts.append(f"driver {status.driver_version}")
    if status.cuda_driver_version:
        facts.append(f"CUDA {status.cuda_driver_version}")
    facts.append(f"{len(snapshot.gpus)} GPU" + ("" if len(snapshot.gpus) == 1 else "s"))
    if snapshot.process_total is not None:  # every process on the box, not the rows kept
        facts.append(f"{snapshot.process_total} processes")
    return Content.styled(" · ".join(facts), "dim")
