"""JobSnapshot.live_phase / live_phase_s from a real segment's live word and a fake clock."""

from __future__ import annotations

import pytest

from tests.ring_helpers import make_segment
from tests.test_jobs_collector import MS, Clock, _steps
from traintop import ring_format
from traintop.collectors import ring_header
from traintop.collectors.jobs import JobCollector

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


def test_the_boot_id_is_read_once_not_per_segment_and_tick(setup, monkeypatch) -> None:
    """The live phase needs this boot's id for every live segment each tick: read it once."""
    w, clock, col = setup
    reads = []
    real = ring_format.boot_id
    monkeypatch.setattr(ring_format, "boot_id", lambda: reads.append(1) or real())
    ring_header._this_boot.cache_clear()
    try:
        end = _steps(w, 0, 10**12, 10)
        for tick in range(3):
            w.set_live(BACKWARD, end + tick * MS)
            clock.t = end / 1e9 + tick
            assert col.collect()[0].live_phase == "backward"
    finally:
        ring_header._this_boot.cache_clear()
    assert reads == [1]
