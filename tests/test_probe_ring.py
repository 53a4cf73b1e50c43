"""The probe against a real ring segment: its live-word stores, records read back, release."""

from __future__ import annotations

import itertools
import os

import pytest

from tests.test_probe import Clock, FakeTensor
from traintop.collectors.ring_reader import open_segment
from traintop.probe import BACKWARD, DATA, FORWARD, OPTIMIZER, OTHER, Probe
from traintop.ring import RingWriter


def ring_probe(tmp_path, clock: Clock, phases: tuple[str, ...] = ()) -> Probe:
    directory = tmp_path / "ring"
    directory.mkdir(mode=0o700, exist_ok=True)

    def factory(names):
        return RingWriter.create(name="job", phases=names, directory=str(directory))

    return Probe("job", writer_factory=factory, clock=clock, phases=phases)


def live_word(probe: Probe) -> tuple[int, int]:
    hot = open_segment(probe._writer.path).hot()
    return hot.live_phase, hot.live_start_ns


def test_every_boundary_stores_phase_and_start_in_the_live_word(tmp_path) -> None:
    clock = Clock(tick=10)
    probe = ring_probe(tmp_path, clock)
    probe.step()  # creates the segment
    batches = iter(probe.loader([[1, 2]]))
    next(batches)  # the batch arrived: back to "no phase", published as "other"
    assert live_word(probe) == (OTHER, clock.now & -16)
    probe.mark("forward")
    assert live_word(probe) == (FORWARD, clock.now & -16)
    with probe.phase("backward"):
        assert live_word(probe) == (BACKWARD, clock.now & -16)
    assert live_word(probe) == (FORWARD, clock.now & -16)  # the exit publishes the outer phase
    probe._switch(OPTIMIZER)
    assert live_word(probe) == (OPTIMIZER, clock.now & -16)


@pytest.mark.parametrize("custom", [(), ("h2d",), ("h2d", "comm", "ckpt")])
def test_records_read_back_partition_the_step_for_every_phase_count(tmp_path, custom) -> None:
    clock = Clock(tick=10)
    probe = ring_probe(tmp_path, clock, phases=custom)
    for _batch in probe.loader([(FakeTensor(3, 8), FakeTensor(3))] * 4):
        probe.mark("forward")
        for name in custom:
            probe.mark(name)
        probe.step()
    records = list(open_segment(probe._writer.path).last(10))
    assert [r.step for r in records] == [0, 1, 2, 3] and {r.samples for r in records} == {3}
    later = records[1:]
    assert all(len(r.phase_ns) == 5 + len(custom) for r in records)
    assert all(r.phase_ns[DATA] == 10 and r.phase_ns[FORWARD] == 10 for r in later)
    for before, after in itertools.pairwise(later):  # the first: segment creation
        assert sum(before.phase_ns) == after.t_start_ns - before.t_start_ns


def test_a_segment_released_under_the_probe_silences_it_without_a_word(tmp_path, capsys):
    probe = ring_probe(tmp_path, Clock())
    probe.step()
    probe._writer.close()  # what atexit does to every writer, or a fork to the child's copy
    probe.mark("forward")
    with probe.phase("backward"):
        pass
    for _batch in probe.loader([1, 2]):
        probe.step()
    assert not probe.enabled and capsys.readouterr().err == ""


def test_a_forked_child_goes_quiet_and_the_parent_keeps_recording(tmp_path) -> None:
    probe = ring_probe(tmp_path, Clock())
    probe.step()
    pid = os.fork()
    if pid == 0:  # the child: its inherited segment copy is released by the ring's at-fork hook
        code = 0
        try:
            probe.mark("forward")
            probe.step()
            code = 0 if not probe.enabled else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    probe.mark("forward")
    probe.step()
    assert os.waitstatus_to_exitcode(status) == 0
    assert [r.step for r in open_segment(probe._writer.path).last(10)] == [0, 1]


class BrokenShape:
    @property
    def shape(self) -> tuple[int, ...]:
        raise RuntimeError("shape is broken")


def test_a_batch_whose_shape_raises_disables_the_probe_not_the_loop(tmp_path, capsys) -> None:
    probe = ring_probe(tmp_path, Clock())
    probe.step()
    seen = [batch for batch in probe.loader([BrokenShape(), BrokenShape()])]
    assert len(seen) == 2 and not probe.enabled
    assert capsys.readouterr().err.count("traintop: probe disabled") == 1
