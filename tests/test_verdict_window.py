"""How often VerdictWindow judges: every tick while the window is too short for a verdict
(3 s), then every 2 s (every other tick at 1 s ticks) up to 16 live ranks, every
``ceil(ranks / 16)`` ticks beyond if that is longer (never holding a verdict 4 s or more), and
at once when a job starts, ends or stalls."""

from __future__ import annotations

from tests.diagnosis_factories import Scene
from traintop.diagnosis.stabilizer import VerdictStabilizer
from traintop.diagnosis.verdict_window import VerdictWindow

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


def test_every_tick_is_judged_while_collecting_data():
    judged, verdicts = _judged(DATA_CPU.but(extra_jobs=7).window(n=4))
    assert judged == [0, 1, 2, 3]
    assert [v.primary.summary for v in verdicts[:3]] == [
        f"collecting data: {s:.1f} of 3 s" for s in (0, 1, 2)
    ]
    assert verdicts[3].primary.bottleneck == "data_cpu"


def test_one_eight_rank_job_is_judged_every_two_seconds():
    judged, verdicts = _judged(DATA_CPU.but(extra_jobs=7).window(n=8))
    assert judged == [0, 1, 2, 3, 5, 7]
    assert verdicts[4].primary == verdicts[3].primary  # a skipped tick shows the last verdict


def test_the_two_seconds_hold_at_any_interval():
    """Every 8th tick at 0.25 s, every tick from 2 s up (the exporter's 5 s ticks)."""
    scene = DATA_CPU.but(extra_jobs=7)
    judged, _ = _judged(scene.window(n=29, dt=0.25))
    assert [t for t in judged if t >= 3] == [3, 5, 7]
    assert _judged(scene.window(n=4, dt=2.0))[0] == [0, 2, 4, 6]
    assert _judged(scene.window(n=3, dt=5.0))[0] == [0, 5, 10]


def test_48_live_ranks_are_judged_every_third_tick():
    judged, verdicts = _judged(DATA_CPU.but(extra_jobs=47).window(n=10))
    assert judged == [0, 1, 2, 3, 6, 9]
    assert verdicts[4].primary == verdicts[3].primary  # a skipped tick shows the last verdict


def test_no_verdict_is_held_four_seconds_however_many_ranks():
    """128 ranks would wait 8 ticks of 1 s; the exporter's 5 s ticks with 64 ranks, 4 ticks."""
    judged, _ = _judged(DATA_CPU.but(extra_jobs=127).window(n=12))
    assert judged == [0, 1, 2, 3, 7, 11]
    judged, _ = _judged(DATA_CPU.but(extra_jobs=63).window(n=3, dt=5.0))
    assert judged == [0, 5, 10]


def test_a_change_of_state_is_judged_at_once():
    """32 ranks (every other tick); the job stalls at tick 6 and is judged then, not at 7."""
    running, stalled = DATA_CPU.but(extra_jobs=31), DATA_CPU.but(extra_jobs=31, state="stalled")
    snaps = [(stalled if i >= 6 else running).snapshot(1000.0 + i, i) for i in range(9)]
    judged, _ = _judged(snaps)
    assert judged == [0, 1, 2, 3, 5, 6, 8]


def test_a_carried_verdict_keeps_counting_how_long_it_has_held():
    _, verdicts = _judged(DATA_CPU.but(extra_jobs=31).window(n=9))
    judged, carried = verdicts[7], verdicts[8]
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
    snaps = [*scene.window(n=6), *scene.window(n=2, start=500.0)]
    judged, _ = _judged(snaps)
    assert judged == [0, 1, 2, 3, 5, -500, -499]
