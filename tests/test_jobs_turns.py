"""JobCollector beyond 16 live ranks: ranks summarised in turns, the focused job every tick,
a rank that ends, stalls or is killed between its turns summarised at once, a recorder fed
every record (real segments with scripted records and a fake clock; then real writers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.polling import eventually
from tests.process_trees import ended
from tests.ring_helpers import make_segment
from tests.scenarios.harness import kill_tree
from tests.test_jobs_collector import Clock, _steps
from traintop.collectors.jobs import JobCollector

JOBS, RANKS = 3, 8  # 24 live ranks: each has its turn every other tick
STEP_NS = 10_000_000


@pytest.fixture
def box(tmp_path):
    """Three 8-rank jobs that have stepped for 1 s, and a collector that has read them once."""
    ring = tmp_path / "ring"
    writers = {
        (job, rank): make_segment(
            ring, name=f"job{job}", rank=rank, world_size=RANKS, run_id=f"rdzv{job}"
        )
        for job in range(JOBS)
        for rank in range(RANKS)
    }
    clock = Clock(0.0)
    col = JobCollector(str(ring), clock=clock)
    box = Box(writers, clock, col)
    box.tick()
    return box


class Box:
    """The writers of the ``box`` fixture, the fake clock, the collector and its last tick."""

    def __init__(self, writers, clock, col):
        self.writers, self.clock, self.col = writers, clock, col
        self.t_ns = 1000 * 10**9
        self.steps = 0
        self.last: dict[tuple[str, int], object] = {}

    def tick(self, stepping=None):
        """One second more of steps (100 by each rank in ``stepping``, default all), then a
        collect; returns the (job, rank) keys whose snapshot is a new one."""
        for key, w in self.writers.items():
            if stepping is None or key in stepping:
                _steps(w, self.steps, self.t_ns, 100)
        self.steps += 100
        self.t_ns += 100 * STEP_NS
        self.clock.t = self.t_ns / 1e9
        snaps = {(s.name, s.rank): s for s in self.col.collect()}
        fresh = {k for k, s in snaps.items() if self.last.get(k) is not s}
        self.last = snaps
        return {(int(name[3:]), rank) for name, rank in fresh}

    def job_id(self, job: int) -> str:
        return self.last[(f"job{job}", 0)].job_id


def ranks_of(*jobs: int) -> set[tuple[int, int]]:
    return {(job, rank) for job in jobs for rank in range(RANKS)}


def test_ranks_take_turns_job_by_job_and_carried_ones_are_unchanged(box):
    first, second, third = box.tick(), box.tick(), box.tick()
    # an even share is 12 of 24 a tick, rounded up to whole jobs: two of the three
    assert all(turn in (ranks_of(0, 1), ranks_of(1, 2), ranks_of(0, 2)) for turn in (first, second))
    assert first | second == ranks_of(0, 1, 2) and third != second
    job, rank = next(key for key in ranks_of(0, 1, 2) if key not in third)
    carried = box.last[(f"job{job}", rank)]  # as summarised a tick ago, 100 steps behind
    assert carried.state == "live" and carried.steps_total <= box.steps - 100
    assert box.last[("job0", 0) if job else ("job2", 0)].steps_total > box.steps - 100


def test_the_focused_job_is_summarised_every_tick(box):
    box.col.focus = box.job_id(1)
    for _ in range(4):
        fresh = box.tick()
        assert fresh in (ranks_of(1, 0), ranks_of(1, 2))  # and one of the other two jobs


def test_a_rank_that_ends_between_turns_is_summarised_at_once(box):
    """With job 0 on screen, jobs 1 and 2 take turns a tick each: a rank of the job that just
    had its turn ends, and shows finished on the next tick, the other job's turn."""
    box.col.focus = box.job_id(0)
    job = 1 if ranks_of(1) <= box.tick() else 2
    box.writers[(job, 5)].close()
    fresh = box.tick()
    assert ranks_of(3 - job) <= fresh and fresh & ranks_of(job) == {(job, 5)}
    assert box.last[(f"job{job}", 5)].state == "finished"


def test_a_rank_that_stops_stepping_is_stalled_at_once(box):
    """With job 0 on screen, jobs 1 and 2 take turns a tick each; a rank of the job whose
    turns fall on odd ticks stops stepping, and its 5 s are up on an even one."""
    box.col.focus = box.job_id(0)
    job = 1 if ranks_of(1) <= box.tick() else 2
    stuck, other = (3 - job, 4), job
    states = []
    for tick in range(1, 7):
        fresh = box.tick(stepping=ranks_of(0, 1, 2) - {stuck})
        assert (ranks_of(other) <= fresh) == (tick % 2 == 0)  # the turns, as planned
        states.append(box.last[(f"job{stuck[0]}", stuck[1])].state)
    assert states == ["live"] * 5 + ["stalled"]  # past 5 s on tick 6, not its job's turn
    assert stuck in fresh and not ranks_of(3 - job) - {stuck} <= fresh


def test_a_recorder_gets_every_ranks_records_on_every_tick(box):
    seen: list[int] = []
    box.col.on_records = lambda header, result: seen.append(len(result.records))
    for _ in range(3):
        seen.clear()
        fresh = box.tick()
        assert len(seen) == JOBS * RANKS and len(fresh) == 16


LOAD = Path(__file__).resolve().parents[1] / "benchmarks" / "ring_load.py"


@pytest.fixture
def three_real_jobs(tmp_path):
    """Three 8-rank jobs of real writer processes (benchmarks/ring_load.py), 50 steps/s each."""
    ring = str(tmp_path / "ring")
    launchers = [
        subprocess.Popen(
            [
                sys.executable,
                str(LOAD),
                "--dir",
                ring,
                "--ranks",
                "8",
                "--rate",
                "50",
                "--seconds",
                "120",
                "--name",
                f"job{j}",
            ],
            start_new_session=True,
        )
        for j in range(3)
    ]
    yield JobCollector(ring)
    for launcher in launchers:
        kill_tree(launcher)


def _collect_until(col: JobCollector, ready, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        snaps = col.collect()
        if ready(snaps):
            return snaps
        time.sleep(0.25)
    raise AssertionError(f"not ready in {timeout_s} s: {[(s.name, s.state) for s in snaps]}")


def _all_stepping(snaps) -> bool:
    return sum(s.state == "live" and s.steps_total > 0 for s in snaps) == 24


def test_a_real_rank_killed_between_turns_reads_gone_on_the_next_tick(three_real_jobs):
    col = three_real_jobs
    snaps = _collect_until(
        col, lambda s: sum(j.state == "live" and j.steps_total > 0 for j in s) == 24
    )
    col.focus = next(s.job_id for s in snaps if s.name == "job0")
    for _ in range(4):  # ranks found on different ticks come to share their job's turns
        time.sleep(0.25)
        before = {(s.name, s.rank): s for s in col.collect()}
    time.sleep(0.25)
    after = {(s.name, s.rank): s for s in col.collect()}
    turned = next(name for name in ("job1", "job2") if after[(name, 0)] is not before[(name, 0)])
    victim = after[(turned, 3)].pid  # its job just had its turn: the next tick is the other's
    os.kill(victim, signal.SIGKILL)
    assert eventually(lambda: ended(victim), every_s=0.01)  # a zombie's flock is gone
    final = {(s.name, s.rank): s for s in col.collect()}
    assert final[(turned, 3)].state == "gone"  # a SIGKILL leaves no word
    assert final[(turned, 4)] is after[(turned, 4)]  # the rest of its job: still carried


def test_the_job_of_a_pid_is_summarised_every_tick_until_a_job_is_focused(three_real_jobs):
    """`diagnose --job PID`, `record --job PID` and attach mode name one rank's pid."""
    col = three_real_jobs
    snaps = _collect_until(col, _all_stepping)
    col.focus_pid = next(s.pid for s in snaps if (s.name, s.rank) == ("job2", 5))
    job0 = next(s.job_id for s in snaps if s.name == "job0")
    last = {(s.name, s.rank): s for s in col.collect()}
    for focused in ("job2",) * 3 + ("job0",) * 3:
        col.focus = job0 if focused == "job0" else None
        time.sleep(0.25)
        now = {(s.name, s.rank): s for s in col.collect()}
        assert all(now[(focused, r)] is not last[(focused, r)] for r in range(8)), focused
        last = now
