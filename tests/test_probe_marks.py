"""``probe.mark(name)``: phase boundaries with one clock read each, against a scripted clock."""

from __future__ import annotations

from tests.test_probe import live, make_probe
from traintop.probe import BACKWARD, DATA, FORWARD, OPTIMIZER, OTHER


def _marked_steps(probe, batches: int) -> None:
    for _batch in probe.loader([[1, 2]] * batches):
        probe.mark("forward")
        probe.mark("backward")
        probe.mark("optimizer")
        probe.step()


def test_each_mark_closes_the_previous_phase_and_step_closes_the_last() -> None:
    probe, writers, _ = make_probe()  # every clock read advances 10 ns
    _marked_steps(probe, 3)
    second = writers[0].records[1]["phases"]
    assert second[DATA] == 10 and second[FORWARD] == 10  # wait, then batch -> backward mark
    assert second[BACKWARD] == 10 and second[OPTIMIZER] == 10  # optimizer mark -> step()
    third_start, second_start = writers[0].records[2]["start"], writers[0].records[1]["start"]
    assert sum(second) == third_start - second_start  # the phases still cover the whole step
    assert second[OTHER] == 20  # step() -> next wait and batch -> first mark: not optimizer


def test_mark_before_any_batch_starts_the_step() -> None:
    probe, writers, clock = make_probe()
    probe.mark("forward")
    start = clock.now
    probe.mark("backward")
    probe.step()
    (record,) = writers[0].records
    assert record["start"] == start
    assert record["phases"][FORWARD] == 10 and record["phases"][BACKWARD] == 10


def test_unknown_names_get_custom_slots_until_the_segment_exists_then_other() -> None:
    probe, writers, _ = make_probe()
    probe.mark("h2d")
    probe.step()
    assert writers[0].phases[5:] == ("h2d",)
    probe.mark("h2d")
    probe.mark("late-name")  # the header is written: no new slot, counted as "other"
    probe.step()
    phases = writers[0].records[1]["phases"]
    assert phases[5] == 10 and phases[OTHER] == 20  # step -> h2d gap, then "late-name"


def test_marks_publish_the_live_phase_at_each_boundary() -> None:
    probe, writers, clock = make_probe()
    probe.step()
    probe.mark("backward")
    probe.mark("optimizer")
    assert writers[0].live == [live(BACKWARD, clock.now - clock.tick), live(OPTIMIZER, clock.now)]


def test_mark_inside_a_with_block_ends_with_the_block() -> None:
    probe, writers, _ = make_probe()
    with probe.phase("forward"):
        probe.mark("backward")
    probe.step()
    phases = writers[0].records[0]["phases"]
    assert phases[FORWARD] == 10 and phases[BACKWARD] == 10 and phases[OTHER] == 10


def test_a_failing_clock_disables_the_probe_without_raising(capsys) -> None:
    def broken() -> int:
        raise OSError("clock gone")

    probe, writers, _ = make_probe(clock=broken)
    probe.mark("forward")
    probe.mark("backward")
    probe.step()
    assert not probe.enabled and writers == []
    assert capsys.readouterr().err.count("\n") == 1


def test_unhashable_names_and_marks_after_close_never_raise(capsys) -> None:
    probe, writers, _ = make_probe()
    probe.step()
    probe.mark(["not", "a", "name"])  # type: ignore[arg-type]
    assert not probe.enabled
    probe.mark("forward")
    probe.step()
    assert len(writers[0].records) == 1 and "probe disabled" in capsys.readouterr().err
