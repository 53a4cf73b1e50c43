"""How often VerdictWindow judges: every tick up to 16 live ranks, every ``ceil(ranks / 16)``
ticks beyond (never holding a verdict 4 s or more), and at once when a job starts, ends or
stalls."""

from __future__ import annotations

from diagnosis.stabilizer import VerdictStabilizer
from diagnosis.verdict_window import VerdictWindow
from tests.diagnosis_factories import Scene

DATA_CPU = Scene(data_wait=0.62, worker_cpu=98)


class CountingStabilizer(VerdictStabilizer):
    """Notes the time of every window it is asked to judge."""

    def __init__(self) -> None:
        super().__init__()
        self.judged: list[float] = []

    def update(self, window, **kwargs):
        self.judged.append(window[-1].monotonic)
        return super().update(window, **kwargs)


def _judged(snapshots) -> tuple[list[float], list]:
    stabilizer = CountingStabilizer()
    window = VerdictWindow(stabilizer=stabilizer)
    verdicts = [window.update(snap) for snap in snapshots]
    return [t - 1000.0 for t in stabilizer.judged], verdicts


def test_one_eight_rank_job_is_judged_on_every_tick():
    judged, _ = _judged(DATA_CPU.but(extra_jobs=7).window(n=6))
    assert judged == [0, 1, 2, 3, 4, 5]


def test_48_live_ranks_are_judged_every_third_tick():
    judged, verdicts = _judged(DATA_CPU.but(extra_jobs=47).window(n=9))
    assert judged == [0, 3, 6]
    assert verdicts[4].primary == verdicts[3].primary  # a skipped tick shows the last verdict


def test_no_verdict_is_held_four_seconds_however_many_ranks():
    """128 ranks would wait 8 ticks of 1 s; the exporter's 5 s ticks with 64 ranks, 4 ticks."""
    judged, _ = _judged(DATA_CPU.but(extra_jobs=127).window(n=9))
    assert judged == [0, 4, 8]
    judged, _ = _judged(DATA_CPU.but(extra_jobs=63).window(n=3, dt=5.0))
    assert judged == [0, 5, 10]


def test_a_change_of_state_is_judged_at_once():
    """32 ranks (every other tick); the job stalls at tick 3 and is judged then, not at 4."""
    running, stalled = DATA_CPU.but(extra_jobs=31), DATA_CPU.but(extra_jobs=31, state="stalled")
    snaps = [(stalled if i >= 3 else running).snapshot(1000.0 + i, i) for i in range(6)]
    judged, _ = _judged(snaps)
    assert judged == [0, 2, 3, 5]


def test_a_carried_verdict_keeps_counting_how_long_it_has_held():
    _, verdicts = _judged(DATA_CPU.but(extra_jobs=31).window(n=8))
    judged, carried = verdicts[6], verdicts[7]
    assert judged.since_s is not None
    assert carried.since_s == judged.since_s + 1.0
    assert carried.primary == judged.primary
    held = [(job.job_id, job.since_s) for job in judged.per_job if job.since_s is not None]
    assert held, "the scene's jobs are live: each has held its primary for some time"
    assert [(job.job_id, job.since_s) for job in carried.per_job if job.since_s is not None] == [
        (job_id, since + 1.0) for job_id, since in held
    ]


def test_a_clock_that_went_back_is_judged_at_once():
    scene = DATA_CPU.but(extra_jobs=31)
    snaps = [*scene.window(n=3), *scene.window(n=2, start=500.0)]
    judged, _ = _judged(snaps)
    assert judged == [0, 2, -500]
