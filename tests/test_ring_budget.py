"""Ended runs cost little shared memory: finished segments shrink, new writers trim to a budget."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.isolation import private_dir
from tests.ring_helpers import PHASES, consistent, make_segment, write
from traintop import ring_paths
from traintop.collectors.ring_reader import open_segment
from traintop.ring import RingWriter
from traintop.ring_format import segment_size
from traintop.ring_shrink import KEEP_RECORDS

FLOOR = ring_paths.MIN_FREE_BYTES


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


def _run(ring: Path, ranks: int, crash: bool) -> tuple[list[bool], int]:
    """One job: ``ranks`` forked trainers all live at once; their writers' states, and the
    free bytes while all of them ran."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pids = [
        _rank(ring, rank, ranks, crash, (ready_r, ready_w, go_r, go_w)) for rank in range(ranks)
    ]
    os.close(ready_w), os.close(go_r)
    with os.fdopen(ready_r, "rb") as ready:
        enabled = [b == ord("1") for b in ready.read(ranks)]
        st = os.statvfs(ring)
        os.close(go_w)  # all ranks see EOF: they finish (or crash) together
        for pid in pids:
            os.waitpid(pid, 0)
    return enabled, st.f_bavail * st.f_frsize


def _rank(ring: Path, rank: int, world: int, crash: bool, pipes: tuple[int, ...]) -> int:
    pid = os.fork()
    if pid:
        return pid
    ready_r, ready_w, go_r, go_w = pipes
    os.close(ready_r), os.close(go_w)  # else no rank ever sees the parent's EOF
    w = RingWriter.create(name="sweep", phases=PHASES, rank=rank, world_size=world,
                          directory=str(ring), run_id=str(os.getppid()))  # fmt: skip
    for i in range(300):
        write(w, i)
    os.write(ready_w, b"1" if w.enabled else b"0")
    os.read(go_r, 1)
    if not crash:
        w.close()
    os._exit(0)


def test_a_hundred_8_rank_runs_in_a_64_mb_shm_are_all_instrumented(small_shm):
    ring = private_dir(small_shm / "traintop")
    lowest = None
    for run in range(100):
        enabled, free = _run(ring, 8, crash=run % 10 == 9)
        assert all(enabled), f"run {run}: ranks {enabled}"
        lowest = free if lowest is None else min(lowest, free)
    assert lowest >= FLOOR
    held = sum(p.stat().st_blocks * 512 for p in ring_paths.list_segments(ring))
    # the budget applies when a writer starts: the last run's segments come on top of it
    assert held <= ring_paths.ENDED_BUDGET_BYTES + 8 * segment_size(4096)
