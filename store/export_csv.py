"""`traintop export FILE --csv DIR`: one CSV per table, for spreadsheets, pandas and gnuplot.

Columns are the keys of `traintop snapshot --json` (base units in the names), plus a
``timestamp`` (epoch seconds) first; the GPU table starts with the columns the performance
guides log (timestamp, GPU index, utilization, memory used and total, temperature, power).
Nested lists (a GPU's processes, a job's workers) are left to their own tables or to the JSON.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from traintop.collectors.export import snapshot_to_dict
from traintop.store.reader import Recording

GPU_FIRST = ("timestamp", "index", "util_gpu_pct", "mem_used_bytes", "mem_total_bytes",
             "temp_c", "power_w")  # fmt: skip
TABLES = ("gpus", "cpu", "cpu_cores", "memory", "disks", "nics", "processes", "jobs",
          "verdicts", "steps")  # fmt: skip


def export_csv(rec: Recording, directory: Path) -> list[Path]:
    """Write every table into ``directory`` (created if needed); the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        writers = _Writers(directory, stack)
        for index in range(len(rec.samples)):
            snapshot, verdict = rec.sample(index)
            for table, row in _sample_rows(snapshot_to_dict(snapshot), verdict):
                writers.write(table, row)
        for row in _step_rows(rec):
            writers.write("steps", row)
        return writers.paths()


class _Writers:
    """A csv writer per table, opened at its first row (its keys become the header)."""

    def __init__(self, directory: Path, stack: ExitStack) -> None:
        self._dir, self._stack = directory, stack
        self._writers: dict[str, csv.DictWriter] = {}

    def write(self, table: str, row: dict[str, Any]) -> None:
        if table not in self._writers:
            fh = self._stack.enter_context((self._dir / f"{table}.csv").open("w", newline=""))
            writer = csv.DictWriter(fh, fieldnames=list(row), extrasaction="ignore")
            writer.writeheader()
            self._writers[table] = writer
        self._writers[table].writerow(row)

    def paths(self) -> list[Path]:
        return [self._dir / f"{t}.csv" for t in TABLES if t in self._writers]


def _sample_rows(d: dict[str, Any], verdict) -> Iterator[tuple[str, dict[str, Any]]]:
    t = {"timestamp": d["timestamp"]}
    for gpu in d["gpus"]:
        yield "gpus", _gpu_row(t, gpu)
    if d["cpu"] is not None:
        cpu = d["cpu"]
        yield "cpu", {**t, **_scalars(cpu["total"]), **_scalars(cpu)}
        for core in cpu["cores"]:
            yield "cpu_cores", {**t, **_scalars(core)}
    if d["memory"] is not None:
        yield "memory", {**t, **_scalars(d["memory"])}
    for table in ("disks", "nics", "processes", "jobs"):
        for item in d[table]:
            yield table, {**t, **_scalars(item)}
    if verdict is not None:
        p = verdict.primary
        yield "verdicts", {**t, "bottleneck": p.bottleneck, "severity": p.severity,
                           "confidence": p.confidence, "summary": p.summary}  # fmt: skip


def _gpu_row(t: dict[str, Any], gpu: dict[str, Any]) -> dict[str, Any]:
    row = {**t, **_scalars(gpu)}
    active = gpu.get("clocks_event_reasons_active")
    row["clocks_event_reasons_active"] = "|".join(active) if active else ""
    return {**{k: row.get(k) for k in GPU_FIRST}, **row}


def _scalars(d: dict[str, Any]) -> dict[str, Any]:
    """The fields that fit in a cell; a 3-tuple like the load average is spread over columns."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, list | tuple):
            if value and len(value) <= 3 and all(isinstance(v, int | float) for v in value):
                out.update({f"{key}_{i}": v for i, v in enumerate(value)})
        elif not isinstance(value, dict):
            out[key] = value
    return out


def _step_rows(rec: Recording) -> Iterator[dict[str, Any]]:
    """Every recorded step of every rank: wall-clock start, then each phase in seconds (the
    columns are the union of all jobs' phases, so every row has the same header)."""
    segments = rec.segments()
    names = list(dict.fromkeys(name for seg in segments for name in seg.phases))
    for seg in segments:
        for block in rec.steps(seg):
            for r in block:
                yield _step_row(seg, r, names)


def _step_row(seg, r, names: list[str]) -> dict[str, Any]:
    row = {
        "timestamp": (r.t_start_ns + seg.clock_offset_ns) / 1e9,
        "job": seg.name,
        "job_id": seg.job_id,
        "rank": seg.rank,
        "pid": seg.pid,
        "step": r.step,
        "step_s": sum(r.phase_ns) / 1e9,
        "samples": r.samples,
        "flags": r.flags,
    }
    phases = dict(zip(seg.phases, r.phase_ns, strict=True))
    row.update({f"{n}_s": phases[n] / 1e9 if n in phases else None for n in names})
    return row
