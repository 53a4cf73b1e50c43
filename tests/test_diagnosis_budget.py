"""The time budget: each rule claims only the time its cause explains, and the largest claim leads.

Windows from ``Scene`` with the step series of the cases in issue 28: a loader that delivers in
bursts (its long steps are data wait), a checkpointing loop (its long steps are its own work),
a loader blocked on a throttled disk (storage, whatever iowait the host leaves visible).
"""

from __future__ import annotations

import pytest

from tests.diagnosis_factories import Scene
from traintop.diagnosis.api import diagnose, verdict_to_dict
from traintop.diagnosis.budget import over_medians, paused_wait, split_by_phase
from traintop.diagnosis.bursts import bursts_of
from traintop.diagnosis.findings import confidence, ranked
from traintop.diagnosis.job_verdicts import _split_stated
from traintop.diagnosis.model import Candidate, Finding

PHASES = ("data", "forward", "backward", "optimizer", "other")


def _series(
    steps: list[dict[str, float]],
) -> tuple[tuple[float, ...], tuple[tuple[float, ...], ...]]:
    """Step times and their per-phase columns from one dict of phase seconds per step."""
    columns = tuple(tuple(step.get(name, 0.0) for step in steps) for name in PHASES)
    return tuple(sum(step.values()) for step in steps), columns


def _shares(columns: tuple[tuple[float, ...], ...]) -> tuple[tuple[str, float], ...]:
    total = sum(map(sum, columns))
    return tuple((name, sum(column) / total) for name, column in zip(PHASES, columns, strict=True))


def _scene(steps: list[dict[str, float]], **knobs) -> Scene:
    times, columns = _series(steps)
    return Scene(
        gpu_count=0,
        cpus=2,
        step_times=times,
        phase_times=columns,
        phases=_shares(columns),
        steps_per_tick=len(times) // 11,
        **knobs,
    )


WORK = {"forward": 0.0006, "backward": 0.0005, "optimizer": 0.0001, "other": 0.0001}
# Two workers, each 0.48 s a batch; a step needs ~1 ms: every other step waits ~0.49 s (the
# window holds a few more short steps than long ones: the median is a short step, as on the
# runs that read periodic_stall).
BURSTS = [{"data": 0.49 if i % 2 and i > 2 else 0.0008, **WORK} for i in range(44)]
BURSTY = _scene(BURSTS, workers=2, worker_cpu=1.0, worker_read=0.0, data_wait=0.99)
# A healthy 8 ms step, and every 25th a 0.7 s checkpoint between steps ("other").
CKPT = [
    {"data": 0.0006, "forward": 0.004, "backward": 0.003, "other": 0.7 if i % 25 == 24 else 0.0004}
    for i in range(550)
]
CHECKPOINTS = _scene(CKPT, workers=0, trainer_cpu=100.0, data_wait=0.01)
# Two workers reading 1 MiB files from a disk capped at 8 MB/s, blocked in D; a host others
# keep busy (85 %) leaves iowait at 1 %.
DISK = _scene(
    [{"data": 0.92 if i % 2 else 0.13, **WORK} for i in range(22)],
    workers=2,
    worker_cpu=1.0,
    worker_read=4e6,
    worker_state="D",
    data_wait=0.99,
    iowait=1.0,
    cpu_busy=85.0,
)


def test_long_steps_excess_goes_to_the_phase_that_ran_over() -> None:
    columns = ((0.001, 0.001, 0.5, 0.001), (0.004, 0.004, 0.004, 0.2))  # data, other
    overs = over_medians(columns, [2, 3])
    parts = split_by_phase(("data", "other"), overs, [0.499, 0.196])
    assert parts == pytest.approx({"data": 0.499, "other": 0.196})
    assert paused_wait(("data", "other"), overs, [0.499, 0.196]) == 0.0  # a wait, then work


def test_a_pauses_own_wait_for_its_batches_is_the_pauses() -> None:
    """An evaluation pass loads its batches (booked as data) and runs the model (forward): its
    wait is its own; a burst-fed loader's long step is a wait with the rest at its medians."""
    names = ("data", "forward", "other")
    columns = ((0.001,) * 9 + (0.06, 0.1), (0.002,) * 9 + (0.1, 0.002), (0.001,) * 11)
    overs = over_medians(columns, [9, 10])
    assert paused_wait(names, overs, [0.156, 0.1]) == pytest.approx(0.059 * 0.156 / 0.157)


def test_burst_fed_loader_is_starved_not_stalled() -> None:
    verdict = diagnose(BURSTY.window())
    assert verdict.primary.bottleneck == "data_starved"
    assert "periodic_stall" not in [f.bottleneck for f in verdict.also]
    assert verdict.primary.evidence[0].text == (
        "data wait 99 % of time, in bursts of 2 batches every 494 ms: 2 workers × 471 ms per batch"
    )
    (budget,) = verdict_to_dict(verdict)["per_job"][0]["budget"]
    assert budget["long_steps"] > 0 and budget["excess"]["data"] > 0.9


def test_burst_fed_loader_without_per_step_phases_is_still_starved() -> None:
    """Older writers and recordings carry no per-step split: the excess is split like the
    time, which still gives the long steps' excess to the wait."""
    verdict = diagnose(BURSTY.but(phase_times=()).window())
    assert [verdict.primary.bottleneck, *(f.bottleneck for f in verdict.also)] == ["data_starved"]


def test_checkpoints_outside_the_waits_are_a_periodic_stall() -> None:
    verdict = diagnose(CHECKPOINTS.window())
    assert verdict.primary.bottleneck == "periodic_stall"
    text = verdict.primary.evidence[0].text
    assert text.startswith("22 of 550 steps took > 3× the 8 ms median (max 708 ms): ")
    assert text.endswith("% of time beyond it, in other")
    assert verdict.primary.share > 0.7


# A healthy 2.6 ms step, and every 60th an evaluation pass: 24 batches loaded (60 ms, booked as
# data by the probe's loader hook) and run through the model (100 ms, in forward)
EVAL = [
    {"data": 0.06 if i % 60 == 59 else 0.0005, "forward": 0.1 if i % 60 == 59 else 0.001,
     "backward": 0.001, "other": 0.0001}
    for i in range(600)
]  # fmt: skip


def test_an_evaluations_own_loading_is_the_pauses_time() -> None:
    """The pass's loading is its own wait: the lost share, and what taking it off the step
    buys, count it (they counted only its forward: +29 % said where 1.99x was measured)."""
    verdict = diagnose(_scene(EVAL, workers=0, trainer_cpu=100.0, data_wait=0.14).window())
    assert verdict.primary.bottleneck == "periodic_stall"
    total = sum(sum(step.values()) for step in EVAL)
    paused = sum(sum(step.values()) - 0.0026 for step in EVAL[59::60]) / total
    forward = sum(step["forward"] - 0.001 for step in EVAL[59::60]) / total
    assert verdict.primary.share == pytest.approx(paused, abs=0.03)  # 0.50 (the window's 0.48)
    assert verdict.primary.share > forward + 0.15  # 0.31: its forward's alone
    gain = verdict.primary.gain_of(verdict.primary.remedies[0])
    assert gain is not None and gain.speedup == pytest.approx(1 / (1 - paused), rel=0.05)


def test_the_data_rules_claim_the_wait_outside_the_pauses() -> None:
    """Its loading counted once: a data wait of 25 % that is mostly the evaluation's is no
    loader's problem; at 45 % the rest (about 27 %) is."""
    found = diagnose(_scene(EVAL, workers=0, trainer_cpu=100.0, data_wait=0.25).window())
    assert [f.bottleneck for f in (found.primary, *found.also)] == ["periodic_stall"]
    found = diagnose(_scene(EVAL, workers=0, trainer_cpu=100.0, data_wait=0.45).window())
    data = next(f for f in found.also if f.bottleneck.startswith("data_"))
    assert data.share == pytest.approx(0.45 - 0.18, abs=0.03)


def test_loader_blocked_reading_is_storage_on_a_busy_host() -> None:
    """Workers in D while the job reads: storage, though iowait (idle time) is hidden."""
    verdict = diagnose(DISK.window())
    assert verdict.primary.bottleneck == "data_io"
    texts = [e.text for e in verdict.primary.evidence]
    assert "2 loading processes blocked reading 100 % of the time (1 % CPU each)" in texts
    assert "job reads 8.0 MB/s from storage" in texts
    assert verdict.primary.share == pytest.approx(0.99)


def test_readers_without_a_state_and_without_pressure_are_starved() -> None:
    """No state sampled (no procfs), no iowait, loaders busy enough: nothing shows storage."""
    verdict = diagnose(DISK.but(worker_state=None, worker_cpu=30.0).window())
    assert verdict.primary.bottleneck == "data_starved"


def test_wait_split_between_storage_and_sleep_says_both() -> None:
    """Workers blocked half the time and asleep the other half: a near tie, stated with the
    split; the more specific cause leads on every window (no flip from run to run)."""
    half = DISK.but(worker_state="D", worker_state_alt="S")
    verdict = diagnose(half.window())
    assert [verdict.primary.bottleneck, verdict.also[0].bottleneck] == ["data_io", "data_starved"]
    texts = [e.text for e in verdict.primary.evidence]
    assert "the loaders meanwhile: 55 % blocked reading, 44 % idle" in texts
    assert texts[-1] == "data_starved explains nearly as much: 44 % of time against 55 %"


def test_near_claims_go_to_the_preferred_cause_and_far_ones_to_the_largest() -> None:
    def found(name: str, share: float) -> Candidate:
        return Candidate(Finding(name, 0.9, "warning", name, share=share), share)

    assert ranked([found("data_starved", 0.5), found("data_io", 0.4)])[0].finding.bottleneck == (
        "data_io"
    )
    assert ranked([found("data_starved", 0.5), found("data_io", 0.3)])[0].finding.bottleneck == (
        "data_starved"
    )


def test_confidence_grows_with_the_share_explained_and_its_steadiness() -> None:
    assert confidence(1.0, 0.5, 1.0) == 0.95
    assert confidence(1.0, 0.2, 1.0) < confidence(1.0, 0.4, 1.0) < 0.95
    assert confidence(1.0, 0.5, 0.5) < confidence(1.0, 0.5, 1.0)
    steady = diagnose(BURSTY.window()).primary.confidence
    wavering = diagnose(BURSTY.but(data_wait_alt=0.05).window()).primary.confidence
    assert wavering < steady


def test_bursts_need_a_whole_number_of_alike_batches() -> None:
    steady = [0.2] * 20
    assert bursts_of(steady, steady, 2) is None
    ragged = [0.0, 1.0, 0.0, 0.5] * 5
    assert bursts_of(ragged, ragged, 2) is None
    assert bursts_of([0.0, 0.5] * 10, [0.01, 0.5] * 10, 2) is not None


def test_a_preferred_cause_that_leads_with_less_says_the_other_claims_more() -> None:
    def found(name: str, share: float) -> Candidate:
        return Candidate(Finding(name, 0.9, "warning", name, share=share), share)

    head, _second = _split_stated(ranked([found("data_starved", 0.5), found("data_io", 0.4)]))
    assert head.finding.bottleneck == "data_io"
    assert head.finding.evidence[-1].text == (
        "data_starved explains as much or more: 50 % of time against 40 %"
    )


# A 2 ms step, every fourth stretched 5x in every phase alike: preemptions on a crowded host.
PREEMPTED = [
    {k: v * (5.0 if i % 4 == 3 else 1.0) for k, v in {"data": 0.00004, **WORK}.items()}
    for i in range(440)
]


def _claims(scene: Scene) -> list[str]:
    verdict = diagnose(scene.window())
    return [verdict.primary.bottleneck, *(f.bottleneck for f in verdict.also)]


def test_steps_stretched_alike_while_queued_for_a_cpu_are_not_a_periodic_stall() -> None:
    """Every phase of the long steps ran over as the steps' time is split: the trainer was
    preempted, and its time queued (35 %) explains the excess wherever it fell; alone (no
    queueing), the same steps are a periodic stall."""
    scene = _scene(PREEMPTED, workers=0, trainer_cpu=95.0, data_wait=0.01)
    assert "periodic_stall" in _claims(scene)
    assert "periodic_stall" not in _claims(scene.but(trainer_main=(60.0, 35.0)))


def test_a_checkpoint_at_one_point_of_the_loop_stays_a_stall_while_queued() -> None:
    """The same queueing beside checkpoints: the excess is in ``other`` only, not spread like
    the steps, so queueing explains only its even share of it."""
    scene = CHECKPOINTS.but(trainer_main=(60.0, 35.0))
    assert _claims(scene)[0] == "periodic_stall"
