"""`traintop export`: the Chrome trace-event JSON checked against the format, and the CSV tables.

The trace checks follow the Trace Event Format document (the spec chrome://tracing and
Perfetto read): every event has ``ph``, ``pid``, ``tid`` and, except metadata, a numeric
``ts`` in microseconds; complete events (``X``) have a non-negative ``dur``; on one thread,
slices nest or follow one another, never overlap partially.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.isolation import no_gpu_env

ROOT = Path(__file__).resolve().parents[1]
TRAINTOP = [sys.executable, "-m", "traintop.cli.main"]
PHASES = {"M", "X", "C", "i"}

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # a real training job under `traintop run --record`


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    """A real two-epoch CPU job (32 steps) recorded under `traintop run --record`."""
    tmp = tmp_path_factory.mktemp("export")
    path = tmp / "job.ttrec"
    job = [sys.executable, str(ROOT / "tests/workloads/train_loop.py"), "--epochs", "2"]
    out = subprocess.run([*TRAINTOP, "run", "--record", str(path), "--", *job],
                         env={**os.environ, **no_gpu_env(tmp)}, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0 and "and 32 step records" in out.stderr, out.stderr
    return path


def _export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TRAINTOP, "export", *args], capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def validate_trace(doc: dict) -> list[dict]:
    """Raise AssertionError at the first departure from the trace-event format."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit", "ms") in ("ms", "ns")
    for e in doc["traceEvents"]:
        assert e["ph"] in PHASES, e
        assert isinstance(e["name"], str) and isinstance(e["pid"], int)
        assert isinstance(e["tid"], int), e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "thread_sort_index"), e
            assert isinstance(e["args"], dict)
            continue
        assert isinstance(e["ts"], int | float) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], int | float) and e["dur"] >= 0, e
        if e["ph"] == "C":
            assert all(isinstance(v, int | float) for v in e["args"].values()), e
        if e["ph"] == "i":
            assert e.get("s", "t") in ("g", "p", "t"), e
    _check_nesting([e for e in doc["traceEvents"] if e["ph"] == "X"])
    return doc["traceEvents"]


def _check_nesting(slices: list[dict]) -> None:
    by_thread: dict[tuple[int, int], list[dict]] = {}
    for e in slices:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    for events in by_thread.values():
        stack: list[float] = []
        for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1] <= e["ts"] + 1e-6:  # ends where the next starts
                stack.pop()
            end = e["ts"] + e["dur"]
            assert not stack or end <= stack[-1] + 1e-6, f"{e} overlaps its parent"
            stack.append(end)


def test_the_trace_is_valid_and_has_one_track_per_rank_with_every_step(recording, tmp_path):
    out_path = tmp_path / "trace.json"
    out = _export(str(recording), "--trace", str(out_path))
    assert out.returncode == 0, out.stderr
    events = validate_trace(json.loads(out_path.read_text()))
    steps = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    assert [e["args"]["step"] for e in steps] == list(range(32))
    threads = [e for e in events if e["name"] == "thread_name"]
    assert [t["args"]["name"].split(" (")[0] for t in threads] == ["rank 0"]
    phases = {e["name"] for e in events if e["ph"] == "X" and e["cat"] == "phase"}
    assert {"data", "forward", "backward", "optimizer"} <= phases
    step = steps[5]  # its phases are the slices written after it, before the next step
    at = events.index(step)
    after = events[at + 1 : events.index(steps[6])]
    inside = [e for e in after if e["ph"] == "X" and e["cat"] == "phase"]
    assert all(step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 0.01
               for e in inside)  # fmt: skip
    assert sum(e["dur"] for e in inside) == pytest.approx(step["dur"], abs=0.01)


def test_the_csv_tables(recording, tmp_path):
    out = _export(str(recording), "--csv", str(tmp_path / "csv"))
    assert out.returncode == 0, out.stderr
    names = {p.name for p in (tmp_path / "csv").iterdir()}
    assert {"cpu.csv", "cpu_cores.csv", "memory.csv", "processes.csv", "jobs.csv",
            "verdicts.csv", "steps.csv"} <= names  # fmt: skip
    with (tmp_path / "csv" / "steps.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == list(range(32))
    assert all(float(r["data_s"]) > 0 for r in rows)
    with (tmp_path / "csv" / "cpu_cores.csv").open() as fh:
        assert {"timestamp", "index", "busy_pct"} <= set(next(csv.DictReader(fh)))


def test_the_gpu_table_has_the_columns_the_guides_log(tmp_path):
    from tests.snapshot_fixtures import series
    from tests.store_helpers import record

    path = record(tmp_path / "gpus.ttrec", series(3, gpus=8), [None] * 3)
    out = _export(str(path), "--csv", str(tmp_path / "csv"))
    assert out.returncode == 0, out.stderr
    with (tmp_path / "csv" / "gpus.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:7] == ["timestamp", "index", "util_gpu_pct", "mem_used_bytes",
                                 "mem_total_bytes", "temp_c", "power_w"]  # fmt: skip
    assert len(rows) == 24 and rows[2]["index"] == "2"


def test_export_needs_an_output():
    out = _export("whatever.ttrec")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
