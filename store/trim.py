"""What a recorded snapshot leaves out, because it is kept better elsewhere or never looked at.

Processes: a box runs hundreds of idle daemons and kernel threads; the process panel shows a
screenful sorted by CPU (or memory).  Kept: every process of a job (trainers and their
DataLoader workers) or holding GPU memory, and the busiest by CPU and by resident memory.

A job's ``recent_step_times_s`` (its last 120 step times, 10 new ones a second at 10 steps/s)
is left out: every one of those steps is in the recording's step records, losslessly, and no
panel draws it.  It was a third of each frame.
"""

from __future__ import annotations

from dataclasses import replace

from collectors.snapshot import JobSnapshot, ProcessSnapshot, Snapshot

# A 250x70 terminal shows about 40 process rows; a recording keeps what fills most screens.
TOP_BY_CPU = 30
TOP_BY_RSS = 15


def trim(snapshot: Snapshot) -> Snapshot:
    """The snapshot as it is recorded."""
    jobs = tuple(_without_recent(job) for job in snapshot.jobs)
    return replace(snapshot, processes=trim_processes(snapshot.processes), jobs=jobs)


def _without_recent(job: JobSnapshot) -> JobSnapshot:
    return replace(job, recent_step_times_s=()) if job.recent_step_times_s else job


def trim_processes(processes: tuple[ProcessSnapshot, ...]) -> tuple[ProcessSnapshot, ...]:
    """The rows worth keeping, in their original order."""
    if len(processes) <= TOP_BY_CPU + TOP_BY_RSS:
        return processes
    keep = {p.pid for p in processes if p.group_pid is not None or p.gpu_mem_bytes}
    keep |= {p.pid for p in _top(processes, lambda p: p.cpu_pct, TOP_BY_CPU)}
    keep |= {p.pid for p in _top(processes, lambda p: p.rss_bytes, TOP_BY_RSS)}
    return tuple(p for p in processes if p.pid in keep)


def _top(processes, value, count: int) -> list[ProcessSnapshot]:
    return sorted(processes, key=lambda p: value(p) or 0, reverse=True)[:count]
