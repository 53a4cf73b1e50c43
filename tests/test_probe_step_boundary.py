"""Where the zero-code hooks end a step (traintop.step_boundary), scripted landmark by landmark.

The landmarks are what the torch hooks report; the writer is the recording fake of
tests/test_probe.py, so each test reads back exactly which records were written with what.
"""

from __future__ import annotations

import pytest

from tests.test_probe import Clock, make_probe
from traintop import step_boundary
from traintop.module_samples import input_rows
from traintop.probe import BACKWARD, FORWARD, NO_PHASE, OPTIMIZER, Probe
from traintop.step_boundary import StepBoundary


class Optimizer:
    """Stands for a torch optimizer: only its identity (and weak-referenceability) matters."""


@pytest.fixture
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps of a loop without optimizer are final at once (not after CONFIRM_S)."""
    monkeypatch.setattr(step_boundary, "CONFIRM_S", 0.0)


def boundary(**kwargs) -> tuple[StepBoundary, Probe, list]:
    probe, writers, _clock = make_probe(**kwargs)
    probe._auto = True
    return StepBoundary(probe), probe, writers


def records(writers: list) -> list[dict]:
    return writers[0].records if writers else []


def optimizer_step(b: StepBoundary, optimizer: Optimizer) -> None:
    b.optimizer_pre(optimizer)
    b.optimizer_post(optimizer)


def batch(b: StepBoundary, probe: Probe, samples: int) -> None:
    b.batch_wanted()
    resumed = probe._wait_begin()
    probe._wait_end(resumed, samples)
    probe._switch(FORWARD)


def backward(b: StepBoundary, probe: Probe) -> None:
    probe._switch(BACKWARD)
    probe._switch(NO_PHASE)
    b.backward_done()


def test_one_optimizer_one_step_per_update() -> None:
    b, probe, writers = boundary()
    opt = Optimizer()
    for _ in range(3):
        batch(b, probe, 8)
        backward(b, probe)
        optimizer_step(b, opt)
    assert [r["samples"] for r in records(writers)] == [8, 8, 8]


def test_two_optimizers_per_iteration_make_one_step_once_learned() -> None:
    """A GAN: D then G.  The first iteration cannot know G ends it (one extra step, and the
    step relearning it straddles two iterations), then one step per iteration, closing after G."""
    b, probe, writers = boundary()
    d, g = Optimizer(), Optimizer()
    for _ in range(10):
        batch(b, probe, 16)
        backward(b, probe)
        optimizer_step(b, d)
        backward(b, probe)
        optimizer_step(b, g)
    assert len(records(writers)) == 11
    assert [r["samples"] for r in records(writers)[3:]] == [16] * 8
    assert all(r["phases"][OPTIMIZER] > 0 for r in records(writers))


@pytest.mark.parametrize("every", [2, 5])
def test_generator_every_nth_iteration_still_one_step_per_batch(every: int) -> None:
    """WGAN: the critic steps every iteration, the generator every n-th."""
    b, probe, writers = boundary()
    critic, generator = Optimizer(), Optimizer()
    for i in range(20):
        batch(b, probe, 4)
        backward(b, probe)
        optimizer_step(b, critic)
        if i % every == 0:
            backward(b, probe)
            optimizer_step(b, generator)
    assert len(records(writers)) in (20, 21)  # the last iteration may still be open
    assert sum(r["samples"] for r in records(writers)) in (76, 80)


def test_gradient_accumulation_counts_every_micro_batch() -> None:
    b, probe, writers = boundary()
    opt = Optimizer()
    for _ in range(4):
        for _micro in range(4):
            batch(b, probe, 8)
            backward(b, probe)
        optimizer_step(b, opt)
    # Until the first update, fetches look like a loop without optimizer: those provisional
    # steps are taken back by it, so even the first step holds its 4 micro-batches.
    assert [r["samples"] for r in records(writers)] == [32, 32, 32, 32]
    assert records(writers)[0]["start"] < records(writers)[1]["start"]


def test_no_optimizer_no_loader_closes_at_the_next_model_call_with_its_rows(no_wait) -> None:
    """word_language_model: forward, backward, a hand-written update; then the next forward."""
    b, probe, writers = boundary()
    for _ in range(3):
        b.model_called(20)
        backward(b, probe)
        probe._switch(NO_PHASE)  # the update: "other"
    assert [r["samples"] for r in records(writers)] == [20, 20]  # the third is still open
    assert all(r["phases"][FORWARD] > 0 and r["phases"][BACKWARD] > 0 for r in records(writers))


def test_optimizer_loop_without_loader_has_no_extra_first_step() -> None:
    b, probe, writers = boundary()
    opt = Optimizer()
    for _ in range(3):
        b.model_called(16)
        backward(b, probe)
        optimizer_step(b, opt)
    assert [r["samples"] for r in records(writers)] == [16, 16, 16]


def test_code_with_no_module_and_no_optimizer_steps_at_each_backward(no_wait) -> None:
    b, probe, writers = boundary()
    for _ in range(3):
        backward(b, probe)
    assert [r["samples"] for r in records(writers)] == [0, 0, 0]


def test_no_optimizer_with_loader_closes_at_each_batch_fetch(no_wait) -> None:
    b, probe, writers = boundary()
    for _ in range(4):
        batch(b, probe, 8)
        backward(b, probe)
    assert [r["samples"] for r in records(writers)] == [8, 8, 8]  # the 4th closes at the next


def test_model_rows_count_once_per_micro_batch_not_per_call() -> None:
    """D(real), D(fake), G pass through D again: one batch; a closure re-evaluated inside the
    optimizer step (LBFGS) is the same batch too."""
    b, probe, writers = boundary()
    d, g, lbfgs = Optimizer(), Optimizer(), Optimizer()
    for _ in range(6):
        b.model_called(16)
        b.model_called(16)
        backward(b, probe)
        optimizer_step(b, d)
        b.model_called(16)
        backward(b, probe)
        optimizer_step(b, g)
    assert [r["samples"] for r in records(writers)[-4:]] == [16] * 4  # once learned
    b2, probe2, writers2 = boundary()
    for _ in range(3):
        b2.optimizer_pre(lbfgs)
        for _evaluation in range(4):
            b2.model_called(256)
            backward(b2, probe2)
        b2.optimizer_post(lbfgs)
    assert [r["samples"] for r in records(writers2)] == [256, 256, 256]


def test_loader_samples_win_over_model_rows() -> None:
    b, probe, writers = boundary()
    opt = Optimizer()
    batch(b, probe, 8)
    b.model_called(99)
    backward(b, probe)
    optimizer_step(b, opt)
    assert records(writers)[0]["samples"] == 8


def test_a_step_with_no_samples_anywhere_writes_zero(no_wait) -> None:
    """The monitor shows that as "—" (no samples counted), never as a dead loader."""
    b, probe, writers = boundary()
    backward(b, probe)
    assert records(writers)[0]["samples"] == 0


def test_a_dropped_leader_is_replaced() -> None:
    b, probe, writers = boundary()
    first = Optimizer()
    optimizer_step(b, first)
    del first  # e.g. a new optimizer per phase of training
    second = Optimizer()
    for _ in range(3):
        backward(b, probe)
        optimizer_step(b, second)
    assert len(records(writers)) == 4


def test_input_rows_reads_the_batch_dimension() -> None:
    class Shaped:
        def __init__(self, *shape: int) -> None:
            self.shape = shape

    assert input_rows((Shaped(35, 20), Shaped(2, 20, 8)), 1) == 20  # (sequence, batch)
    assert input_rows((Shaped(64, 3, 32, 32),), 0) == 64
    assert input_rows(([Shaped(7)],), 1) == 7  # 1-d: its only dimension
    assert input_rows(({"input_ids": Shaped(4, 128)},), 0) == 4
    assert input_rows(("text", 3, None), 0) is None


def test_steps_without_optimizer_are_written_once_confirmed() -> None:
    """Provisional for CONFIRM_S (2 s): then written as they were, in order, and final."""
    b, probe, writers = boundary(clock=Clock(tick=50_000_000))  # 50 ms per clock read
    for _ in range(12):
        batch(b, probe, 8)
        backward(b, probe)
    written = records(writers)
    assert 4 <= len(written) <= 11 and [r["step"] for r in written] == list(range(len(written)))
    assert all(r["samples"] == 8 for r in written)
    assert [r["start"] for r in written] == sorted(r["start"] for r in written)
    before = len(written)
    batch(b, probe, 8)
    assert len(records(writers)) == before + 1  # confirmed: every boundary is final now
