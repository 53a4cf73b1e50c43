"""JobCollector against real segments with scripted records and a fake clock."""

from __future__ import annotations

import pytest

from collectors.jobs import JobCollector
from tests.ring_helpers import make_segment
from traintop.ring import FLAG_GPU_VALID, FLAG_MEM_VALID

MS = 1_000_000
_FLAGS = FLAG_GPU_VALID | FLAG_MEM_VALID


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class NoPs:
    class Process:
        def __init__(self, pid):
            raise ProcessLookupError(pid)


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
    return w, clock, JobCollector(str(tmp_path / "ring"), window_s=10.0, clock=clock, ps=NoPs)


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
    assert job.gpu_busy_share == pytest.approx(0.6)
    assert [p.share for p in job.phases] == pytest.approx([0.2, 0.3, 0.5])
    assert job.cuda_mem_allocated_bytes == 7 << 30
    assert job.last_step_age_s == pytest.approx(0.0)


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
    end = _steps(w, 0, 10**12, 100)
    clock.t = end / 1e9 + 4.0
    assert col.collect()[0].state == "live"
    clock.t = end / 1e9 + 6.0
    job = col.collect()[0]
    assert job.state == "stalled" and job.last_step_age_s == pytest.approx(6.0)
    w.close()
    finished = col.collect()[0]
    assert finished.state == "finished" and finished.steps_per_s == pytest.approx(100.0)
    again = make_segment(tmp_path / "ring")
    _steps(again, 0, end + 10**9, 10)
    states = sorted(j.state for j in col.collect())
    assert states == ["live", "restarted"]


def test_corrupt_segment_is_reported_not_raised(tmp_path):
    (tmp_path / "ring").mkdir(mode=0o700)
    bad = tmp_path / "ring" / "1-r0-0000abcd.ring"
    bad.write_bytes(b"\0" * 70000)
    bad.chmod(0o600)
    col = JobCollector(str(tmp_path / "ring"), ps=NoPs)
    assert col.collect() == ()
    assert len(col.errors) == 1 and "not a traintop ring segment" in col.errors[0]
