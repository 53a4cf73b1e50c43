"""The first poll of a job that has run for a while: its window, not its whole ring.

A monitor that attaches to a job minutes old found a wrapped ring (4,096 records) and read it in
one copy, big enough to import numpy (11 MB of the monitor's peak memory, which thus grew with
the job's age).  The reader now reads such a backlog newest first in blocks, as far back as the
window the collector keeps; these tests hold the reads to that bound and the window to the
figures the whole read gave.
"""

from __future__ import annotations

import pytest

from tests.ring_helpers import make_segment
from traintop import ring_format as fmt
from traintop.collectors.job_window import NEWEST, JobWindow
from traintop.collectors.ring_columns import BIG_POLL
from traintop.collectors.ring_reader import BACKLOG_BLOCK, Segment, open_segment
from traintop.ring import FLAG_GPU_VALID, FLAG_MEM_VALID, RingWriter

STEP_NS = 50_000_000  # 20 steps/s, the benchmarks' job
WINDOW_S = 10.0
WINDOW_NS = int(WINDOW_S * 1e9)


def _write(writer: RingWriter, lo: int, hi: int) -> None:
    """Steps back to back, 50 ms each; a GPU time on one in 16, a memory reading on one in 5."""
    for i in range(lo, hi):
        flags = (FLAG_GPU_VALID if i % 16 == 0 else 0) | (FLAG_MEM_VALID if i % 5 == 0 else 0)
        phases = (10_000_000 + i % 7, 15_000_000, STEP_NS - 25_000_000 - i % 7)
        writer.record(i, i * STEP_NS, phases, 32, 20_000_000 + i, 0, 1000 + i, flags, 0)


def _copies(segment: Segment) -> list[int]:
    """Records per copy this segment makes from now on."""
    sizes: list[int] = []
    copy = segment._copy

    def counted(lo: int, hi: int) -> bytearray:
        sizes.append(hi - lo)
        return copy(lo, hi)

    segment._copy = counted
    return sizes


def _polled(segment: Segment, window: JobWindow, within_ns: int | None) -> None:
    window.add(segment.poll(NEWEST, within_ns))
    window.steps_total = segment.next_index


def _shown(window: JobWindow, written: int):
    return window.snapshot(written * STEP_NS / 1e9, "live", ())


@pytest.mark.parametrize("crc", [False, True])
def test_a_wrapped_rings_first_poll_reads_its_window_in_blocks_with_the_same_figures(tmp_path, crc):
    writer = make_segment(tmp_path / "ring", capacity=4096, crc=crc)
    _write(writer, 0, 10_000)  # wrapped twice over; the window holds 200 steps
    whole, bounded = open_segment(writer.path), open_segment(writer.path)
    as_before = JobWindow(whole.header, WINDOW_S)
    windowed = JobWindow(bounded.header, WINDOW_S)
    sizes = _copies(bounded)
    _polled(whole, as_before, None)
    _polled(bounded, windowed, WINDOW_NS)
    assert BACKLOG_BLOCK < BIG_POLL and max(sizes) <= BACKLOG_BLOCK
    assert sum(sizes) <= WINDOW_NS // STEP_NS + BACKLOG_BLOCK
    assert _shown(windowed, 10_000) == _shown(as_before, 10_000)
    assert bounded.next_index == whole.next_index == 10_000
    _write(writer, 10_000, 10_040)  # the next tick's steps: the same again, a small read
    del sizes[:]
    _polled(whole, as_before, None)
    _polled(bounded, windowed, WINDOW_NS)
    assert sum(sizes) <= 40
    assert _shown(windowed, 10_040) == _shown(as_before, 10_040)


def test_a_backlog_younger_than_the_window_is_read_whole(tmp_path):
    writer = make_segment(tmp_path / "ring", capacity=4096)
    _write(writer, 0, 150)
    segment = open_segment(writer.path)
    result = segment.poll(NEWEST, WINDOW_NS)
    assert [r.seq for r in result.records] == list(range(1, 151))
    assert (result.lost, result.rejected) == (0, 0)


def test_records_overwritten_during_a_backlog_read_are_lost_as_in_one_read(tmp_path):
    writer = make_segment(tmp_path / "ring", capacity=fmt.MIN_CAPACITY * 16)  # 256 records
    _write(writer, 0, 300)
    segment = open_segment(writer.path)  # its cursor: index 45, the oldest safe one
    copy = segment._copy

    def overtaken(lo: int, hi: int) -> bytearray:
        buf = copy(lo, hi)
        if hi == 300:  # while the newest block is copied the writer overwrites [44, 144)
            _write(writer, 300, 400)
        return buf

    segment._copy = overtaken
    result = segment.poll(NEWEST, 10**18)  # a window longer than the ring: all of it wanted
    # One copy of [45, 300) then a head of 400 would keep [145, 300): the same here.
    assert [r.seq for r in result.records] == list(range(146, 301))
    assert (result.lost, result.rejected) == (100, 0)
