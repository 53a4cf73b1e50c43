"""JobCollector against real segments with scripted records and a fake clock."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.ring_helpers import make_segment
from traintop.collectors.jobs import JobCollector
from traintop.collectors.processes import ProcessCollector
from traintop.collectors.ring_reader import open_segment
from traintop.collectors.snapshot import WorkerSnapshot
from traintop.ring import FLAG_GPU_VALID, FLAG_MEM_VALID

MS = 1_000_000
_FLAGS = FLAG_GPU_VALID | FLAG_MEM_VALID


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _past_ns() -> int:
    """A start for scripted steps a minute before now on the real clock: a segment's close
    stamps the real clock, which must come after its steps (at a fixed 10^12 ns, a test run
    in a VM's first 1,000 s of uptime saw the job close before it stepped)."""
    return time.monotonic_ns() - 60 * 10**9


def _steps(w, first_step, t0_ns, n, data_ms=2, fwd_ms=3, bwd_ms=5):
    for k in range(n):
        t = t0_ns + k * (data_ms + fwd_ms + bwd_ms) * MS
        phases = (data_ms * MS, fwd_ms * MS, bwd_ms * MS)
        w.record(first_step + k, t, phases, 32, gpu_ns=6 * MS, flags=_FLAGS, mem_bytes=7 << 30)
    return t0_ns + n * (data_ms + fwd_ms + bwd_ms) * MS


@pytest.fixture
def setup(tmp_path):
    w = make_segment(tmp_path / "ring")
    clock = Clock(0.0)
    return w, clock, JobCollector(str(tmp_path / "ring"), window_s=10.0, clock=clock)


def test_statistics_over_the_window(setup):
    w, clock, col = setup
    start = 1000 * 10**9
    end = _steps(w, 0, start, 500)  # 500 steps of 10 ms = 5 s
    clock.t = end / 1e9
    (job,) = col.collect()
    assert job.state == "live" and job.steps_total == 500 and job.lost_records == 0
    assert job.steps_per_s == pytest.approx(100.0)
    assert job.samples_per_s == pytest.approx(3200.0)
    assert job.step_time_p50_s == pytest.approx(0.010)
    assert job.data_wait_share == pytest.approx(0.2)
    assert job.data_wait_p95_s == pytest.approx(0.002)
    assert job.gpu_queued_share == pytest.approx(0.6)
    assert [p.share for p in job.phases] == pytest.approx([0.2, 0.3, 0.5])
    assert job.cuda_mem_allocated_bytes == 7 << 30
    assert job.last_step_age_s == pytest.approx(0.0)


def test_gpu_queued_share_comes_from_the_steps_the_probe_timed(setup):
    """The probe times one step in 16 on the GPU (traintop/cuda_timing.py): a job whose timed
    steps keep the GPU busy 95 % of their 20 ms is 95 % busy, not 95 % / 16."""
    w, clock, col = setup
    t = 1000 * 10**9
    for k in range(400):
        timed = k % 16 == 0
        w.record(k, t, (2 * MS, 8 * MS, 10 * MS), 32, gpu_ns=19 * MS if timed else 0,
                 flags=FLAG_GPU_VALID if timed else 0)  # fmt: skip
        t += 20 * MS
    clock.t = t / 1e9
    (job,) = col.collect()
    assert job.gpu_queued_share == pytest.approx(0.95)


def test_gpu_queued_share_is_the_steps_own_not_diluted_by_the_step_in_progress(setup):
    """Read halfway into a 100 ms step, five 100 ms steps queued 99 % still read 99 %: the
    window's span runs through the step in progress, the steps' time does not (the span's count
    read 90 % here, and a 99 % job on a loaded box 97 %)."""
    w, clock, col = setup
    t = 1000 * 10**9
    for k in range(5):
        w.record(k, t, (10 * MS, 40 * MS, 50 * MS), 8, gpu_ns=99 * MS, flags=FLAG_GPU_VALID)
        t += 100 * MS
    clock.t = (t + 50 * MS) / 1e9
    (job,) = col.collect()
    assert job.gpu_queued_share == pytest.approx(0.99)


def test_window_slides_and_slow_data_shows(setup):
    w, clock, col = setup
    end = _steps(w, 0, 10**12, 1000)  # 10 s fast
    end = _steps(w, 1000, end, 100, data_ms=40)  # then 100 steps of 48 ms, data-bound
    clock.t = end / 1e9
    (job,) = col.collect()
    assert job.step_time_p95_s == pytest.approx(0.048)
    assert job.data_wait_share > 0.5


def test_stalled_finished_crashed_and_restarted(setup, tmp_path):
    w, clock, col = setup
    end = _steps(w, 0, _past_ns(), 100)
    clock.t = end / 1e9 + 4.0
    assert col.collect()[0].state == "live"
    clock.t = end / 1e9 + 6.0
    job = col.collect()[0]
    assert job.state == "stalled" and job.last_step_age_s == pytest.approx(6.0)
    w.close()
    finished = col.collect()[0]  # it had stopped 6 s before it ended: its final rate says so
    assert finished.state == "finished" and finished.steps_per_s == 0.0
    again = make_segment(tmp_path / "ring")
    _steps(again, 0, end + 10**9, 10)
    states = sorted(j.state for j in col.collect())
    assert states == ["finished", "live"]  # a run that finished is no failed one restarted
    again._release(unlock=True)  # this one dies without a word: gone, and a third replaces it
    third = make_segment(tmp_path / "ring")
    _steps(third, 0, end + 2 * 10**9, 10)
    states = sorted(j.state for j in col.collect())
    assert states == ["finished", "live", "restarted"]


def _wall(w, monotonic_s: float) -> float:
    """``monotonic_s`` of the fake clock as wall-clock time, as the collector converts it."""
    header = open_segment(w.path).header
    return (header.created_realtime_ns - header.created_monotonic_ns) / 1e9 + monotonic_s


@pytest.mark.parametrize(("quiet_s", "final_rate"), [(0.5, 100.0), (8.0, 0.0)])
def test_a_crashed_ranks_final_rate_says_whether_it_had_stopped(setup, quiet_s, final_rate):
    """Killed right after a step, a rank keeps the rate it ran at; killed after waiting longer
    than the stall limit (say for data), its final rate is 0, not the rate from before."""
    w, clock, col = setup
    end = _steps(w, 0, 10**12, 100)  # 100 steps/s
    clock.t = end / 1e9 + quiet_s
    assert col.collect()[0].state in ("live", "stalled")  # seen alive, quiet_s after its step
    w._release(unlock=True)  # the process dies: the lock goes, the state still says running
    clock.t += 1.0
    (job,) = col.collect()
    assert job.state == "gone" and job.steps_per_s == final_rate  # no word: no .end, no dump
    assert job.ending is not None and job.ending.kind == "gone"
    assert job.samples_per_s == 32 * final_rate
    assert job.step_time_p50_s == pytest.approx(0.010)  # what its steps took is still so
    assert job.ended_at == pytest.approx(_wall(w, end / 1e9 + quiet_s))  # last seen alive


def test_a_crash_before_the_monitor_looked_ends_at_its_last_sign_of_life(setup):
    """Its live word says it entered "data" 9 s after its last step: it stopped, then died."""
    w, clock, col = setup
    end = _steps(w, 0, open_segment(w.path).header.created_monotonic_ns, 100)
    w.set_live(0, end + 9 * 10**9)
    w._release(unlock=True)
    clock.t = end / 1e9 + 60.0
    (job,) = col.collect()
    assert job.state == "gone" and job.steps_per_s == 0.0
    assert job.ended_at == pytest.approx(_wall(w, end / 1e9 + 9.0), abs=1e-6)


@pytest.mark.parametrize("quiet_s", [6.0, 12.0])
def test_a_stalled_rank_reads_0_steps_per_s(setup, quiet_s):
    """Stalled, with steps left in its window or none: it steps at 0/s, not at a rate from
    before it stopped, and not at an unknown one."""
    w, clock, col = setup
    end = _steps(w, 0, 10**12, 100)
    clock.t = end / 1e9 + quiet_s
    (job,) = col.collect()
    assert job.state == "stalled" and job.ended_at is None
    assert (job.steps_per_s, job.samples_per_s, job.gpu_queued_share) == (0.0, 0.0, 0.0)
    assert job.step_time_p50_s == (pytest.approx(0.010) if quiet_s < 10 else None)


def test_slow_steps_keep_an_unknown_rate_between_steps_not_0(setup):
    """20 s steps leave the 10 s window empty most of the time, yet the rank is not stalled
    (the limit is 5 steps): its rate is unknown there, never a 0 a rate alert would page on."""
    w, clock, col = setup
    end = _steps(w, 0, 10**12, 3, data_ms=5_000, fwd_ms=5_000, bwd_ms=10_000)
    for quiet_s in (6.0, 15.0, 40.0, 99.0):
        clock.t = end / 1e9 + quiet_s
        (job,) = col.collect()
        assert job.state == "live" and job.steps_per_s != 0.0, quiet_s
    clock.t = end / 1e9 + 101.0
    assert col.collect()[0].steps_per_s == 0.0  # 5 steps of 20 s without one: stalled


def test_a_rank_before_its_first_step_has_no_rate(setup):
    _, clock, col = setup
    clock.t = 10**3
    (job,) = col.collect()
    assert job.steps_per_s is None and job.samples_per_s is None


def test_corrupt_segment_is_reported_not_raised(tmp_path):
    (tmp_path / "ring").mkdir(mode=0o700)
    bad = tmp_path / "ring" / "1-r0-0000abcd.ring"
    bad.write_bytes(b"\0" * 70000)
    bad.chmod(0o600)
    col = JobCollector(str(tmp_path / "ring"))
    assert col.collect() == ()
    assert len(col.errors) == 1 and "not a traintop ring segment" in col.errors[0]


def six_digits(expected: float):
    """A rate, share or percentile as collectors keep it: to 6 significant digits."""
    return pytest.approx(expected, rel=5e-6)


def test_many_steps_per_tick_give_exact_rates_and_shares(setup):
    """2,000 steps in one poll, each different: sums must match a per-step reference."""
    w, clock, col = setup
    t, steps = 10**12, []
    for k in range(2000):
        phases = ((1 + k % 7) * 100_000, (2 + k % 3) * 100_000, 300_000)
        samples, gpu = 16 + k % 2, k % 5 != 0
        w.record(k, t, phases, samples, gpu_ns=200_000, flags=FLAG_GPU_VALID if gpu else 0)
        steps.append((phases, samples, gpu))
        t += sum(phases)
    clock.t = t / 1e9
    (job,) = col.collect()
    total = sum(sum(p) for p, _, _ in steps)
    span = total / 1e9
    assert job.steps_per_s == six_digits(2000 / span)
    assert job.samples_per_s == six_digits(sum(s for _, s, _ in steps) / span)
    assert job.data_wait_share == six_digits(sum(p[0] for p, _, _ in steps) / total)
    # 4 steps in 5 carry a GPU time: the others were not timed, and count as unknown, not idle
    assert job.gpu_queued_share == six_digits(200_000 * 2000 / total)
    newest = sorted(sum(p) for p, _, _ in steps[-128:])
    assert job.step_time_p95_s == six_digits(newest[int(0.95 * 128)] / 1e9)
    assert job.recent_step_times_s[-1] == pytest.approx(sum(steps[-1][0]) / 1e9)
    # the same newest steps split by phase: one column per phase, row sums the step times
    columns = job.recent_phase_times_s
    assert len(columns) == len(job.phases) and {len(c) for c in columns} == {120}
    assert [c[-1] for c in columns[:3]] == pytest.approx([ns / 1e9 for ns in steps[-1][0]])
    assert list(map(sum, zip(*columns, strict=True))) == pytest.approx(job.recent_step_times_s)


def _ended_then_later(setup):
    """An ended job's snapshot 1 s after its last step, its job, and the snapshot 30 s on."""
    w, clock, col = setup
    end = _steps(w, 0, _past_ns(), 100)
    w.close()
    clock.t = end / 1e9 + 1.0
    (first,) = col.collect()
    (job,) = col._jobs.values()
    clock.t += 30.0
    (later,) = col.collect()
    return first, job, later


def test_an_ended_job_is_read_once_then_kept_as_its_summary(setup):
    first, job, later = _ended_then_later(setup)
    assert first.state == "finished" and first.steps_total == 100 and job.segment.closed
    assert later.last_step_age_s == pytest.approx(31.0)
    assert later.steps_per_s == first.steps_per_s == pytest.approx(100.0)


def test_an_ended_jobs_summary_only_ages(setup):
    """Each tick an ended job's snapshot is its kept summary with the age moved on, no more."""
    first, _, later = _ended_then_later(setup)
    assert later == dataclasses.replace(first, last_step_age_s=later.last_step_age_s)
    assert later.last_step_age_s == pytest.approx(31.0)


def test_a_job_without_gpu_measurements_has_no_gpu_share(setup):
    """GPU time counts only where a step says it measured some (a CPU-only job: none)."""
    w, clock, col = setup
    t = 10**12
    for k in range(50):
        w.record(k, t, (MS, 2 * MS, 3 * MS), 8, gpu_ns=5 * MS)  # a value, but no FLAG_GPU_VALID
        t += 6 * MS
    clock.t = t / 1e9
    (job,) = col.collect()
    assert job.gpu_queued_share is None and job.steps_per_s == six_digits(1e9 / (6 * MS))


def test_slow_steps_raise_the_stall_limit_above_its_floor(setup):
    """Past STALL_MIN_S the limit is STALL_STEP_FACTOR x the median step: 2 s steps, 10 s."""
    w, clock, col = setup
    end = _steps(w, 0, 10**12, 5, data_ms=500, fwd_ms=500, bwd_ms=1000)
    clock.t = end / 1e9 + 6.0
    assert col.collect()[0].state == "live"
    clock.t = end / 1e9 + 9.9
    assert col.collect()[0].state == "live"
    clock.t = end / 1e9 + 10.1
    assert col.collect()[0].state == "stalled"


class _Table:
    """A process scan that saw the given children (ppid -> WorkerSnapshot tuples)."""

    def __init__(self, children):
        self.asked, self.children = [], children

    def workers_of(self, pids):
        self.asked.append(set(pids))
        return {pid: kids for pid, kids in self.children.items() if pid in pids}

    def threads_of(self, pid):
        return ()


def test_workers_come_from_the_shared_process_scan_for_live_jobs_only(setup):
    w, clock, col = setup
    end = _steps(w, 0, _past_ns(), 10)
    kid = WorkerSnapshot(4242, 55.0, 1 << 20, 1e6)
    table = _Table({os.getpid(): (kid,)})
    col.share_process_scan(table)
    clock.t = end / 1e9
    assert col.collect()[0].workers == (kid,) and table.asked == [{os.getpid()}]
    w.close()
    assert col.collect()[0].workers == () and len(table.asked) == 1


def test_a_rank_started_by_another_rank_is_not_its_worker():
    """Lightning's launcher makes rank 1 a child of rank 0; only real children are workers."""
    code = ("import subprocess, time; kids = [subprocess.Popen(['sleep', '30']) for _ in '12'];"
            "print(*(k.pid for k in kids), flush=True); time.sleep(30)")  # fmt: skip
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as rank0:
        worker, rank1 = map(int, rank0.stdout.readline().split())
        try:
            scan = ProcessCollector()
            scan.collect()
            found = scan.workers_of({rank0.pid, rank1})
        finally:
            for pid in (worker, rank1, rank0.pid):
                os.kill(pid, signal.SIGKILL)
    assert [w.pid for w in found[rank0.pid]] == [worker] and rank1 not in found
