"""What periodic pauses are, from the stacks sampled in their phase, and the remedy each gets.

The stacks are shaped as the helper thread reports them (outermost first; the frames of runs
of tests/scenarios/workloads/periodic_stall.py and periodic_eval.py under `traintop diagnose`).
"""

from __future__ import annotations

import pytest

from tests.diagnosis_factories import Scene
from traintop.collectors.snapshot import Frame, PhaseSamples, StackSample
from traintop.diagnosis import remedies
from traintop.diagnosis.api import diagnose
from traintop.diagnosis.pause_kind import CHECKPOINT, EVALUATION, OTHER, pause_kind
from traintop.diagnosis.where import SAMPLES_FRESH_S

pytestmark = pytest.mark.quick

TORCH = "/venv/lib/python3.11/site-packages/torch"
MODULE = Frame(f"{TORCH}/nn/modules/module.py", 1773, "_wrapped_call_impl", "")
CALL = Frame(f"{TORCH}/nn/modules/module.py", 1784, "_call_impl", "")
LINEAR = Frame(f"{TORCH}/nn/modules/container.py", 244, "forward", "input = module(input)")
LOOP = Frame("common.py", 56, "train", "loss = loss_fn(model(inputs), labels)")
HOOK = Frame("common.py", 62, "after_step", "after_step(step)")
MAIN = Frame("job.py", 120, "main", "train(loader, model)")

SAVE = (MAIN, HOOK, Frame("job.py", 45, "after_step", "torch.save(model.state_dict(), out)"),
        Frame(f"{TORCH}/serialization.py", 965, "save", ""))  # fmt: skip
FSYNC = (MAIN, HOOK, Frame("job.py", 47, "after_step", "os.fsync(out.fileno())"))
EVAL = (MAIN, HOOK, Frame("job.py", 31, "after_step", "sum(...)"),
        Frame("job.py", 31, "<genexpr>", "sum(loss_fn(model(x), y).item() for x, y in val)"),
        MODULE, CALL, LINEAR)  # fmt: skip
STEP = (MAIN, LOOP, MODULE, CALL, LINEAR)
LOG = (Frame("job.py", 10, "train_with_checkpoints", "log_metrics(step)"),
       Frame("job.py", 88, "log_metrics", "time.sleep(0.5)"))  # fmt: skip


def sampled(phase: str, *stacks: tuple[tuple[Frame, ...], int], age: float = 1.0) -> PhaseSamples:
    matched = sum(count for _, count in stacks)
    folded = tuple(StackSample(frames, count) for frames, count in stacks)
    return PhaseSamples(phase, 20, matched, folded, age)


@pytest.mark.parametrize(
    ("samples", "kind", "place"),
    [
        (sampled("other", (SAVE, 7), (FSYNC, 2)), CHECKPOINT, "after_step (job.py:45)"),
        (sampled("other", (FSYNC, 3)), CHECKPOINT, "after_step (job.py:47)"),
        (sampled("other", (EVAL, 6)), EVALUATION, "after_step (job.py:31)"),
        (sampled("forward", (EVAL, 3), (STEP, 5)), EVALUATION, "after_step (job.py:31)"),
        (sampled("other", (LOG, 5), (EVAL, 2)), OTHER, "log_metrics (job.py:88)"),
    ],
    ids=["torch.save", "fsync", "model outside the step", "model from two places", "a sleep"],
)
def test_what_the_stacks_show_the_pauses_are(samples, kind, place) -> None:
    found = pause_kind(samples)
    assert found is not None and (found.kind, found.place) == (kind, place)


def test_the_steps_own_work_or_no_sample_names_nothing() -> None:
    """In forward, the model called from the step's one place is the step's own work; a
    place there is not the pause's.  A set that caught nothing in the phase says nothing."""
    assert pause_kind(sampled("forward", (STEP, 8))) is None
    assert pause_kind(sampled("forward", (LOG, 8))) is None
    assert pause_kind(PhaseSamples("other", 20, 0, (), 1.0)) is None
    assert pause_kind(None) is None
    mixed = pause_kind(sampled("other", (SAVE, 3), (EVAL, 3), (LOG, 2)))
    assert mixed is None  # no kind holds most of them: the remedies stay as unsampled
    found = pause_kind(sampled("other", (SAVE, 5), (LOG, 3)))
    assert found is not None and (found.kind, found.share) == (CHECKPOINT, 5 / 8)


# A loop with a pause every 25 steps, all of it in "other" (as after an optimizer step)
STEPS = (0.25,) * 47 + (5.0, 4.0, 6.0)
PHASES = (("data", 0.05), ("forward", 0.3), ("backward", 0.4), ("optimizer", 0.1), ("other", 0.15))


def _column(name: str, share: float) -> tuple[float, ...]:
    short = tuple(t * share for t in STEPS if t < 1)
    long = tuple(t - 0.25 * (1 - share) if name == "other" else 0.25 * share for t in STEPS[47:])
    return short + long


PAUSED = Scene(step_times=STEPS, phases=PHASES, phase_times=tuple(_column(*p) for p in PHASES))


def _verdict(samples: PhaseSamples | None):
    job = diagnose(PAUSED.but(phase_samples=samples).window()).per_job[0]
    assert job.primary.bottleneck == "periodic_stall"
    return job


@pytest.mark.parametrize(
    ("samples", "first", "offered"),
    [
        (None, remedies.PERIODIC[0], len(remedies.PERIODIC)),
        (sampled("other", (SAVE, 6)), remedies.PERIODIC[0], 1),
        (sampled("other", (EVAL, 6)), remedies.EVALUATE, 1),
        (sampled("other", (LOG, 6)), "run log_metrics (job.py:88) less often", 2),
    ],
    ids=["not sampled yet", "a checkpoint", "an evaluation", "a sleep in logging"],
)
def test_the_remedy_that_buys_the_pause_back_is_the_one_for_what_it_is(samples, first, offered):
    finding = _verdict(samples).primary
    fixes = [finding.gain_of(text) for text in finding.remedies]
    assert finding.remedies[0].startswith(first) and len(fixes) == offered
    assert fixes[0] is not None and fixes[0].speedup is not None
    assert fixes[0].speedup > 1.5  # the pause's share of the time, back
    assert all(f is not None and f.speedup is None for f in fixes[1:])  # the rest only bounded


def test_the_samples_are_named_in_the_evidence_and_asked_for_until_they_say_what() -> None:
    assert _verdict(None).sample == (4242, "other")
    named = _verdict(sampled("other", (EVAL, 6), age=10 * SAMPLES_FRESH_S))
    assert named.sample is None  # once named, kept: the remedy does not change with each set
    assert any("in other (6 samples)" in e.text for e in named.primary.evidence)
    missed = PhaseSamples("other", 20, 0, (), 1.0)
    assert _verdict(missed).sample is None  # a set that missed waits before the next ask
    stale = PhaseSamples("other", 20, 0, (), SAMPLES_FRESH_S + 1)
    assert _verdict(stale).sample == (4242, "other")
