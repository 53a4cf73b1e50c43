"""Ended runs cost little shared memory: finished segments shrink, new writers trim to a budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.isolation import private_dir
from tests.ring_helpers import PHASES, consistent, make_segment, write
from traintop import ring_paths
from traintop.collectors.ring_reader import open_segment
from traintop.ring_format import segment_size
from traintop.ring_shrink import KEEP_RECORDS

FLOOR = ring_paths.MIN_FREE_BYTES
ROOT = Path(__file__).resolve().parents[1]


def _finished(directory: Path, records: int, **kwargs) -> Path:
    w = make_segment(directory, capacity=4096, **kwargs)
    for i in range(records):
        write(w, i)
    w.close()
    return w.path


def test_a_finished_segment_shrinks_to_its_newest_records(tmp_path):
    path = _finished(private_dir(tmp_path / "ring"), 1000)
    assert path.stat().st_size == segment_size(KEEP_RECORDS)
    with open_segment(path) as seg:
        assert seg.liveness() == "finished" and seg.hot().head == 1000
        assert seg.header.capacity == KEEP_RECORDS and seg.header.phases == PHASES
        records = list(seg.poll().records)
    assert [r.seq for r in records] == list(
        range(1002 - KEEP_RECORDS, 1001)
    )  # capacity - 1 readable
    assert all(consistent(r) for r in records)


def test_a_reader_of_the_big_segment_keeps_reading_it_whole(tmp_path):
    w = make_segment(private_dir(tmp_path / "ring"), capacity=4096)
    seg = open_segment(w.path)
    for i in range(3000):
        write(w, i)
    w.close()
    result = seg.poll()
    assert len(result.records) == 3000 and result.lost == 0 and seg.liveness() == "finished"
    assert all(consistent(r) for r in result.records)
    seg.close()


def test_a_segment_smaller_than_the_summary_is_left_as_it_is(tmp_path):
    w = make_segment(private_dir(tmp_path / "ring"), capacity=64)
    write(w, 0)
    w.close()
    assert w.path.stat().st_size == segment_size(64)


def test_budget_removes_the_oldest_ended_segments_never_a_live_one(tmp_path):
    ring = private_dir(tmp_path / "ring")
    live = make_segment(ring, capacity=4096)
    old = [_finished(ring, 10, rank=r) for r in range(4)]
    for age, path in enumerate(old):  # the lower the rank, the older
        os.utime(path, (1000.0 + age, 1000.0 + age))
    os.utime(live.path, (1.0, 1.0))  # oldest of all, but live
    removed = ring_paths.trim_ended(ring, budget=2 * segment_size(KEEP_RECORDS))
    assert sorted(removed) == sorted(old[:2])
    assert live.path.exists() and all(p.exists() for p in old[2:])
    live.close()


def test_a_crashed_segment_keeps_its_size_until_a_new_writer_trims_it(tmp_path):
    ring = private_dir(tmp_path / "ring")
    pid = os.fork()
    if pid == 0:  # a trainer killed before it could close
        w = make_segment(ring, capacity=4096)
        write(w, 0)
        os._exit(0)
    os.waitpid(pid, 0)
    (crashed,) = ring_paths.list_segments(ring)
    assert crashed.stat().st_size == segment_size(4096)
    assert ring_paths.trim_ended(ring, budget=0) == [crashed]


def test_closing_a_segment_someone_truncated_does_not_kill_the_trainer(tmp_path):
    ring = private_dir(tmp_path / "ring")
    pid = os.fork()
    if pid == 0:  # reading the lost pages to shrink them would raise SIGBUS in the trainer
        w = make_segment(ring, capacity=4096)
        write(w, 0)
        os.truncate(w.path, 8192)
        w.close()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    (segment,) = ring_paths.list_segments(ring)
    assert segment.stat().st_size == 8192  # left as it was, not replaced


@pytest.fixture
def small_shm(tmp_path):
    """A 64 MB tmpfs, Docker's default /dev/shm size (needs root to mount)."""
    mnt = tmp_path / "shm"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)],
                          capture_output=True, check=False)  # fmt: skip
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_hundred_8_rank_runs_in_a_64_mb_shm_are_all_instrumented(small_shm):
    ring = private_dir(small_shm / "traintop")
    argv = [sys.executable, "-m", "tests.ring_sweep", str(ring), "100", "8"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240, check=True)
    sweep = json.loads(done.stdout)
    for run, enabled in enumerate(sweep["enabled"]):
        assert all(enabled), f"run {run}: ranks {enabled}"
    assert min(sweep["free"]) >= FLOOR
    held = sum(p.stat().st_blocks * 512 for p in ring_paths.list_segments(ring))
    # the budget applies when a writer starts: the last run's segments come on top of it
    assert held <= ring_paths.ENDED_BUDGET_BYTES + 8 * segment_size(4096)
