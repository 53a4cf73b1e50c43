"""What a recorded snapshot leaves out, because it is kept better elsewhere or never looked at.

Processes: a box runs hundreds of idle daemons and kernel threads; the process panel shows a
screenful sorted by CPU (or memory).  Kept: every process of a job (trainers and their
DataLoader workers) or holding GPU memory, and the busiest by CPU and by resident memory.

A job's ``recent_step_times_s`` (its last 120 step times, 10 new ones a second at 10 steps/s)
and their split by phase (``recent_phase_times_s``) are left out: every one of those steps is in
the recording's step records, losslessly, and no panel draws them.  The times alone were a third
of each frame.

A process's ``cpu_wait_s`` (its threads' total wait for a CPU since they started, in ns as float
seconds) is left out too: no panel, verdict or comparison reads it, its rate ``cpu_wait_pct``
is kept, and a growing total's low digits change every second: 1.1 MB an hour for 45 rows
(`benchmarks/bench_record.py`: 20.5 MB/h with it, 19.4 without).
"""

from __future__ import annotations

from dataclasses import replace

from traintop.collectors.snapshot import JobSnapshot, ProcessSnapshot, Snapshot

# A 250x70 terminal shows about 40 process rows; a recording keeps what fills most screens.
TOP_BY_CPU = 30
TOP_BY_RSS = 15


def trim(snapshot: Snapshot) -> Snapshot:
    """The snapshot as it is recorded."""
    jobs = tuple(_without_recent(job) for job in snapshot.jobs)
    processes = tuple(map(_without_wait_total, trim_processes(snapshot.processes)))
    return replace(snapshot, processes=processes, jobs=jobs)


def _without_recent(job: JobSnapshot) -> JobSnapshot:
    if not job.recent_step_times_s and not job.recent_phase_times_s:
        return job
    return replace(job, recent_step_times_s=(), recent_phase_times_s=())


def _without_wait_total(process: ProcessSnapshot) -> ProcessSnapshot:
    return replace(process, cpu_wait_s=None) if process.cpu_wait_s is not None else process


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
