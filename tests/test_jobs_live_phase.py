"""JobSnapshot.live_phase / live_phase_s from a real segment's live word and a fake clock."""

from __future__ import annotations

import pytest

from collectors.jobs import JobCollector
from tests.ring_helpers import make_segment
from tests.test_jobs_collector import MS, Clock, _steps

BACKWARD = 2


@pytest.fixture
def setup(tmp_path):
    w = make_segment(tmp_path / "ring")
    clock = Clock(0.0)
    return w, clock, JobCollector(str(tmp_path / "ring"), window_s=10.0, clock=clock)


def test_stalled_job_reports_the_phase_entered_after_the_last_step(setup) -> None:
    w, clock, col = setup
    end = _steps(w, 0, 10**12, 100)
    w.set_live(BACKWARD, end + 3 * MS)
    clock.t = (end + 3 * MS) / 1e9 + 43.0
    (job,) = col.collect()
    assert job.state == "stalled"
    assert job.live_phase == "backward" and job.live_phase_s == pytest.approx(43.0)


def test_phase_entered_before_the_last_step_ended_reads_as_other_since_that_end(setup) -> None:
    w, clock, col = setup
    w.set_live(BACKWARD, 10**12 + 5 * MS)  # inside the last step: closed by it
    end = _steps(w, 0, 10**12, 1)
    clock.t = end / 1e9 + 2.0
    (job,) = col.collect()
    assert job.state == "live"
    assert job.live_phase == "other" and job.live_phase_s == pytest.approx(2.0)


def test_no_live_word_or_a_finished_job_has_no_live_phase(setup) -> None:
    w, clock, col = setup
    end = _steps(w, 0, 10**12, 10)
    clock.t = end / 1e9
    (job,) = col.collect()
    assert job.live_phase is None and job.live_phase_s is None  # never published
    w.set_live(BACKWARD, end)
    w.close()
    (job,) = col.collect()
    assert job.state == "finished" and job.live_phase is None and job.live_phase_s is None
