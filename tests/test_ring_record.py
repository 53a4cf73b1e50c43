"""The writer's compiled fast ``record`` for every phase count, read back by the reader."""

from __future__ import annotations

import pytest

from tests.ring_helpers import make_segment
from traintop.collectors.ring_reader import open_segment
from traintop.ring_format import MAX_PHASES


@pytest.mark.parametrize("n_phases", range(1, MAX_PHASES + 1))
def test_every_phase_count_round_trips_with_its_phases_in_order(tmp_path, n_phases) -> None:
    phases = tuple(f"p{i}" for i in range(n_phases))
    w = make_segment(tmp_path / "ring", phases=phases, crc=False)
    for step in range(3):
        w.record(step, 1000 * step, [step * 100 + i for i in range(n_phases)], 8, 5, 1, 64, 3, 7)
    w.record(9, 1, [1] * (n_phases + 1), 8)  # one phase too many: dropped, never misplaced
    records = list(open_segment(w.path).last(10))
    assert [r.step for r in records] == [0, 1, 2] and w.dropped == 1
    last = records[-1]
    assert last.phase_ns == tuple(200 + i for i in range(n_phases))
    assert (last.samples, last.gpu_ns, last.gpu_lag, last.mem_bytes, last.flags, last.tokens) == (
        8, 5, 1, 64, 3, 7
    )  # fmt: skip


def test_live_step_word_holds_the_next_step_even_for_negative_steps(tmp_path) -> None:
    w = make_segment(tmp_path / "ring", crc=False)
    w.record(41, 10, (1, 2, 3), 1)
    assert open_segment(w.path).hot().live_step == 42
    w.record(-5, 20, (1, 2, 3), 1)
    hot = open_segment(w.path).hot()
    assert hot.live_step == (-4) & (2**64 - 1) and hot.head == 2 and hot.heartbeat_ns == 20
