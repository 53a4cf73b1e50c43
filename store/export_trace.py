"""`traintop export FILE --trace OUT.json`: each rank's step phases as a Chrome trace.

The trace-event format (the JSON that chrome://tracing and Perfetto open) with one process per
job and one thread (track) per rank: a "step N" slice per step with its phases nested inside, in
the order the probe runs them.  The recorded GPU utilization per GPU and the verdict changes
come along as counter and instant events, so a slow stretch of steps lines up with its cause.
Written as a stream: hours of steps never sit in memory at once.  Times are microseconds since
the first thing recorded (``otherData.origin_epoch_s``): epoch microseconds would leave a
double too few digits for sub-microsecond phases.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from traintop.store.reader import RecordedSegment, Recording

VERDICT_PID = 0  # the process holding the machine-wide tracks


def export_trace(rec: Recording, out: Path) -> int:
    """Write the trace; the number of events."""
    count = 0
    origin = rec.start() or 0.0
    with out.open("w") as fh:
        other = json.dumps({"origin_epoch_s": origin, "hostname": rec.meta.get("hostname")})
        fh.write(f'{{"displayTimeUnit":"ms","otherData":{other},"traceEvents":[\n')
        for event in _events(rec, int(origin * 1e9)):
            fh.write(("," if count else "") + json.dumps(event, separators=(",", ":")) + "\n")
            count += 1
        fh.write("]}\n")
    return count


def _events(rec: Recording, origin_ns: int) -> Iterator[dict[str, Any]]:
    yield _meta("process_name", VERDICT_PID, 0, f"machine ({rec.meta.get('hostname', '?')})")
    yield from _machine_tracks(rec, origin_ns / 1e9)
    jobs: dict[str, int] = {}
    for seg in rec.segments():
        pid = jobs.setdefault(seg.job_id, len(jobs) + 1)
        yield _meta("process_name", pid, 0, f"job {seg.name}")
        yield _meta("thread_name", pid, seg.rank, f"rank {seg.rank} (pid {seg.pid})")
        yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": seg.rank,
               "args": {"sort_index": seg.rank}}  # fmt: skip
        yield from _rank_steps(rec, seg, pid, seg.clock_offset_ns - origin_ns)


def _meta(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}}


def _machine_tracks(rec: Recording, origin: float) -> Iterator[dict[str, Any]]:
    """GPU utilization counters and an instant event at each verdict change."""
    verdicts = dict(rec.verdict_timeline())
    last = None
    for index, row in enumerate(rec.samples):
        ts = round((row.t - origin) * 1e6, 3)
        snapshot, _ = rec.sample(index)
        util = {f"GPU {g.index}": g.util_gpu_pct for g in snapshot.gpus
                if g.util_gpu_pct is not None}  # fmt: skip
        if util:
            yield {"ph": "C", "name": "GPU util %", "pid": VERDICT_PID, "tid": 0, "ts": ts,
                   "args": util}  # fmt: skip
        verdict = verdicts.get(row.id)
        if verdict is not None and verdict != last:
            yield {"ph": "i", "s": "g", "name": f"verdict: {verdict}", "pid": VERDICT_PID,
                   "tid": 0, "ts": ts}  # fmt: skip
            last = verdict


def _rank_steps(
    rec: Recording, seg: RecordedSegment, pid: int, offset_ns: int
) -> Iterator[dict[str, Any]]:
    """A slice per step, its phases laid end to end inside it (integer ns until the last
    moment, so a phase never ends after its step in the rounded microseconds)."""
    for block in rec.steps(seg):
        for r in block:
            start = r.t_start_ns + offset_ns
            end = start + sum(r.phase_ns)
            yield _slice(f"step {r.step}", "step", pid, seg.rank, start, end,
                         {"step": r.step, "samples": r.samples})  # fmt: skip
            for name, ns in zip(seg.phases, r.phase_ns, strict=True):
                if ns > 0:
                    yield _slice(name, "phase", pid, seg.rank, start, start + ns, None)
                    start += ns


def _slice(name: str, cat: str, pid: int, tid: int, start_ns: int, end_ns: int,
           args: dict | None) -> dict[str, Any]:  # fmt: skip
    ts, end = round(start_ns / 1e3, 3), round(end_ns / 1e3, 3)
    event = {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts,
             "dur": round(end - ts, 3)}  # fmt: skip
    if args:
        event["args"] = args
    return event
