"""Fast checks of the scenario harness itself: process cleanup, segment discovery, timing, report.

The scenarios are only as trustworthy as the harness: a leaked process would skew the next
scenario's CPU figures, and a wrong time-to-verdict would make the docs lie.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.polling import eventually
from tests.scenarios import report
from tests.scenarios.harness import (
    WORKLOADS,
    DiagnoseRun,
    free_port,
    kill_tree,
    segment_pids,
    start_workload,
    time_to_verdict,
    wait_for_segments,
    workload_processes,
)
from traintop.ring_format import HEAD_WORD

SPAWNS_GRANDCHILD = (
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "print('ready', flush=True); time.sleep(60)"
)


def _wait_for_output(path: Path, text: str) -> None:
    if not eventually(lambda: text in path.read_text()):
        raise AssertionError(f"{text!r} never appeared in {path}")


def test_kill_tree_reaps_grandchildren(tmp_path: Path) -> None:
    log = tmp_path / "tree.log"
    workload = start_workload([sys.executable, "-c", SPAWNS_GRANDCHILD], {}, log)
    _wait_for_output(log, "ready")
    tree = psutil.Process(workload.pid).children(recursive=True)
    assert tree, "the grandchild should exist before the kill"
    kill_tree(workload.proc)
    assert workload.proc.returncode is not None
    assert not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _listed(pid: int) -> bool:
    return any(line.startswith(f"{pid} ") for line in workload_processes())


def test_workload_processes_finds_survivors(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(60)", str(WORKLOADS / "fake.py")]
    workload = start_workload(argv, {}, tmp_path / "survivor.log")
    try:
        # Popen returns once exec closed its pipe, before the kernel has set the new argv up:
        # on a busy machine /proc/PID/cmdline can still read empty for a moment.
        assert eventually(lambda: _listed(workload.pid))
    finally:
        workload.stop()
    assert not _listed(workload.pid)


def test_segment_pids_reads_published_names_that_stepped_only(tmp_path: Path) -> None:
    stepped = bytes(HEAD_WORD * 8) + (1).to_bytes(8, "little")  # head 1: one step published
    (tmp_path / "123-r0-0123abcd.ring").write_bytes(stepped)
    (tmp_path / "456-r1-89abcdef.ring").write_bytes(stepped)
    (tmp_path / "457-r0-89abcdef.ring").write_bytes(bytes(4096))  # made at start-up: no step yet
    (tmp_path / ".tmp-789-r0-00000000.ring").write_bytes(stepped)  # not yet renamed into place
    (tmp_path / "notes.txt").touch()
    assert segment_pids(tmp_path) == {123: 0, 456: 1}
    assert segment_pids(tmp_path / "missing") == {}


def test_wait_for_segments_reports_a_dead_workload(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "print('boom: no torch here'); raise SystemExit(3)"]
    workload = start_workload(argv, {}, tmp_path / "dead.log")
    workload.proc.wait()
    try:
        wait_for_segments(tmp_path, 1, [workload], timeout_s=5)
    except AssertionError as exc:
        assert "exited with 3" in str(exc) and "boom" in str(exc)
    else:
        raise AssertionError("a dead workload must fail the wait")


def _run(verdict: dict | None, finished: float) -> DiagnoseRun:
    return DiagnoseRun(0, verdict, "", started=3.0, finished=finished)


def test_time_to_verdict_subtracts_how_long_the_verdict_held() -> None:
    assert time_to_verdict(100.0, _run({"since_s": 8.0}, 117.5)) == 9.5
    assert time_to_verdict(100.0, _run({"since_s": None}, 117.5)) == 17.5
    assert time_to_verdict(100.0, _run(None, 117.5)) is None


def test_report_renders_observed_values(tmp_path: Path) -> None:
    verdict = {"bottleneck": "compute", "confidence": 0.7, "evidence": ["CPU 97 % | busy"]}
    line = {"scenario": "data_cpu", "time_to_verdict_s": 7.25, "verdict": verdict}
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps(line) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "tests.scenarios.report", str(results)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    row = done.stdout.splitlines()[-1]
    assert row.startswith("| `data_cpu` |") and "| `compute` | 0.70 | 7.2 s |" in row
    assert "CPU 97 % / busy" in row


def test_report_bad_input_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert report.main([str(bad)]) == 1
    assert report.main([]) == 2


def test_each_xdist_worker_gives_ports_of_its_own_slice_and_never_one_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two tests side by side on two workers cannot race for one port; a job seen to end may
    still hold the port it was given, so the next job of this worker gets another."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    first, second = free_port(40000, 40100), free_port(40000, 40100)
    assert 40050 <= first < 40075 and 40050 <= second < 40075 and first != second
    with socket.socket() as held:  # a port something listens on is passed over
        held.bind(("127.0.0.1", 40010))
        held.listen()
        monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
        assert free_port(40010, 40020) not in (40010, first, second)
