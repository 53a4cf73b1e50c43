"""The job collector, made at the first tick that finds a ring segment.

Importing the collector imports the ring reader, the readers of stacks, cgroups and run ends:
0.03 s of the monitor's start (about 90 M instructions, callgrind), spent for nothing on a box
that runs no job yet.  Until a segment appears, a tick lists the ring directories, which is the
collector's own first step, and finds nothing; from the first segment on, the collector does
all the work, as if it had been there from the start (a collector with no segment holds no
state: nothing to clean up, nothing read).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from traintop.collectors.snapshot import JobSnapshot

if TYPE_CHECKING:
    from traintop.collectors.jobs import JobCollector, ProcessTable


class JobsWhenPresent:
    """A ``JobSource`` that makes its collector (``make()``) once a segment exists, or once
    something needs the collector itself (a recording, the job in focus)."""

    def __init__(self, make: Callable[[], JobCollector]) -> None:
        self._make = make
        self._made: JobCollector | None = None
        self._processes: ProcessTable | None = None

    @property
    def collector(self) -> JobCollector:
        """The job collector, made now if it was not yet."""
        if self._made is None:
            self._made = self._make()
            if self._processes is not None:
                self._made.share_process_scan(self._processes)
        return self._made

    def share_process_scan(self, processes: ProcessTable) -> None:
        """The process scan the collector takes DataLoader workers from (``build_collectors``)."""
        self._processes = processes
        if self._made is not None:
            self._made.share_process_scan(processes)

    def collect(self) -> tuple[JobSnapshot, ...]:
        """Every job's snapshot; none, and no collector made, while no segment exists."""
        if self._made is None:
            from traintop.collectors.ring_reader import segment_paths

            if not segment_paths():
                return ()
        return self.collector.collect()

    def close(self) -> None:
        if self._made is not None:
            self._made.close()
