"""The writer's running totals (format 1.1) and the reader that trusts them only when safe.

A monitor reading a fast trainer takes its newest records and the difference of two totals
slots instead of every record; these tests hold the totals to the records they sum, the
reader's spans to what reading every record gives, and the reader to refusing any slot the
writer may have been rewriting while it was copied.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from dataclasses import replace

import pytest

from tests import ring_helpers
from tests.ring_helpers import expected_sums, make_segment, write
from traintop import ring_format as fmt
from traintop.collectors.jobs import JobCollector
from traintop.collectors.ring_reader import Segment, open_segment
from traintop.collectors.ring_records import RecordBlock
from traintop.collectors.ring_totals import last_slot, parsed, read_slot, safe
from traintop.collectors.snapshot import JobSnapshot
from traintop.ring import FLAG_GPU_VALID, FLAG_MEM_VALID, RingWriter


def _slot(path, at: int, n_phases: int):
    fd = os.open(path, os.O_RDONLY)
    try:
        return parsed(read_slot(fd, at), at, n_phases)
    finally:
        os.close(fd)


def _anchored_then(tmp_path, capacity: int, then: int):
    """A segment the reader has polled once at 400 records (learning its totals there), then
    written on to record ``then``: the state every sparse poll starts from."""
    w = make_segment(tmp_path / "ring", capacity=capacity)
    seg = open_segment(w.path)
    for i in range(400):
        write(w, i)
    seg.poll(newest=32)
    for i in range(400, then):
        write(w, i)
    return w, seg


@pytest.mark.parametrize("phases", [("step",), ("data", "fwd", "bwd"), tuple("abcdefgh")])
def test_every_slot_holds_the_sums_of_the_records_before_it(tmp_path, phases):
    w = RingWriter.create(name="t", phases=phases, directory=str(tmp_path / "ring"))
    seg = open_segment(w.path)
    n = len(phases)
    for i in range(1, 41):
        flags = (FLAG_GPU_VALID if i % 3 == 0 else 0) | (FLAG_MEM_VALID if i % 5 == 0 else 0)
        w.record(i, 1000 * i, tuple(range(i, i + n)), i % 4, 7 * i, 0, 100 + i, flags, 0)
    w.record(41, -5, (1.9,) * n, 2**40)  # clamped: the slow path must add it too
    for i in range(42, 49):
        w.record(i, 1000 * i, tuple(range(i, i + n)), 2, 0, 0, 0, 0, 0)
    records = seg.last(48)  # the reader's own column sums are what the totals must equal
    slot = _slot(w.path, 48, n)
    assert slot is not None and slot.at == 48
    assert slot.totals == records.totals() and slot.totals.gpu_steps == 13
    assert slot.mem_bytes == 140  # record 40: the newest with a memory reading
    earlier = _slot(w.path, 40, n)
    first_40 = RecordBlock(records.raw()[: 40 * fmt.RECORD_SIZE], n)
    assert earlier.at == 40 and earlier.totals == first_40.totals()


def test_sums_past_u64_never_raise_into_training_and_readers_read_every_record(tmp_path):
    w = make_segment(tmp_path / "ring")
    seg = open_segment(w.path)
    for i in range(200):  # each value fits its field, their sum does not fit a slot
        w.record(i, 1000 * i, (1, 2, 3), 1, 2**63, 0, 0, FLAG_GPU_VALID, 0)
    assert w.dropped == 0
    assert len(seg.poll(newest=32).records) == 200
    for i in range(200, 400):
        w.record(i, 1000 * i, (1, 2, 3), 1, 2**63, 0, 0, FLAG_GPU_VALID, 0)
    result = seg.poll(newest=32)
    assert result.span is None and len(result.records) == 200 and seg.next_index == 400


def test_a_crc_writer_keeps_no_totals_and_is_read_record_by_record(tmp_path):
    w = make_segment(tmp_path / "ring", crc=True)
    seg = open_segment(w.path)
    assert not seg.header.totals
    for _round in range(3):
        for i in range(seg.next_index, seg.next_index + 300):
            write(w, i)
        result = seg.poll(newest=32)
        assert result.span is None and len(result.records) == 300


def test_a_poll_for_the_newest_records_accounts_for_every_step(tmp_path):
    """After a first full read, each poll returns 32 records and a span up to the newest slot;
    the few steps after the slot come with the next poll."""
    w = make_segment(tmp_path / "ring", capacity=1024)
    seg = open_segment(w.path)
    for i in range(500):
        write(w, i)
    first = seg.poll(newest=32)
    assert first.span is None and len(first.records) == 500
    for i in range(500, 1203):
        write(w, i)
    result = seg.poll(newest=32)
    span = result.span
    assert span is not None and seg.next_index == 1200 and span.steps == 700
    assert [r.seq for r in result.records] == list(range(1169, 1201))
    phases, samples, batches = expected_sums(500, 1200)
    got = (span.totals.phase_ns, span.totals.samples, span.totals.batches)
    assert got == (phases, samples, batches)
    rest = seg.poll(newest=32)
    assert rest.span is None and [r.seq for r in rest.records] == [1201, 1202, 1203]


def test_a_reader_a_whole_ring_behind_loses_no_step_from_its_sums(tmp_path):
    _, seg = _anchored_then(tmp_path, 1024, 5400)  # nearly five laps while the reader was away
    result = seg.poll(newest=32)
    assert result.span is not None and (result.lost, result.span.steps) == (0, 5000)
    got = (result.span.totals.phase_ns, result.span.totals.samples, result.span.totals.batches)
    assert got == expected_sums(400, 5400)


def test_a_slot_is_trusted_only_whole_and_before_the_writer_can_reuse_it():
    def slot(at, end=None):
        return fmt.TOTALS.pack(at, 1, 1, 0, 0, 0, 0, 5, *(0,) * 7, at if end is None else end)

    assert [last_slot(h) for h in (0, 7, 8, 63, 64)] == [0, 0, 8, 56, 64]
    assert parsed(slot(64, end=56), 64, 1) is None  # torn: the two tags differ
    assert parsed(slot(32), 64, 1) is None  # an older tag: not yet rewritten, or mid-rewrite
    assert parsed(slot(64)[:100], 64, 1) is None  # a short read
    found = parsed(slot(64), 64, 1)
    assert found.totals.phase_ns == (5,) and found.totals.samples == 1 and found.mem_bytes is None
    assert safe(found, 64 + 30) and not safe(found, 64 + 31)


def test_a_slot_rewritten_during_the_copy_makes_the_poll_read_every_record(tmp_path):
    w, seg = _anchored_then(tmp_path, 4096, 800)
    copy, laps = seg._copy, iter(range(800, 840))

    def copy_while_writing(lo, hi):
        buf = copy(lo, hi)
        for i in laps:  # 40 more steps while the reader holds its copies: slot 800 may be reused
            write(w, i)
        return buf

    seg._copy = copy_while_writing
    result = seg.poll(newest=32)
    assert result.span is None  # fell back to the full read, from the same cursor
    assert [r.seq for r in result.records] == list(range(401, 801))
    assert (result.lost, result.rejected, seg.next_index) == (0, 0, 800)


def test_totals_that_went_down_are_not_trusted(tmp_path):
    w, seg = _anchored_then(tmp_path, 1024, 800)
    with open(w.path, "r+b") as f:  # slot 800 says fewer samples than slot 400 did
        f.seek(fmt.totals_offset(800) + 8)
        f.write((1).to_bytes(8, "little"))
    result = seg.poll(newest=32)
    assert result.span is None and len(result.records) == 400


def test_the_job_window_from_newest_records_equals_the_one_from_every_record(tmp_path, monkeypatch):
    """Two collectors follow one fast segment, one as a recorder does (every record), one
    reading the newest records and the totals; with whole slots per tick they agree exactly."""
    spans, poll = [], Segment.poll
    monkeypatch.setattr(Segment, "poll", lambda *a: spans.append(poll(*a)) or spans[-1])
    clock = [100.0]
    w = make_segment(tmp_path / "ring", capacity=4096)
    full = JobCollector(str(tmp_path / "ring"), clock=lambda: clock[0])
    full.on_records = lambda header, result: None
    sparse = JobCollector(str(tmp_path / "ring"), clock=lambda: clock[0])
    step = 0
    for _tick in range(6):
        for _ in range(1600):  # 1,600 steps of 0.5 ms: a whole number of slots
            phases = (100_000 + step % 13, 200_000, 200_000 - step % 5)
            w.record(step, 99 * 10**9 + step * 500_000, phases, 32 if step % 7 else 0)
            step += 1
        clock[0] += 1.0
        a, b = _ring_figures(full.collect()[0]), _ring_figures(sparse.collect()[0])
        assert a == b
    assert a.steps_total == 9600 and a.steps_per_s is not None
    assert sum(r.span is not None for r in spans) == 5  # every tick after the first
    for step in range(9600, 9900):  # then the job ends mid-slot: read to its very last step
        w.record(step, 99 * 10**9 + step * 500_000, (100_000, 200_000, 200_000), 32)
    w.close()
    clock[0] += 1.0
    a, b = _ring_figures(full.collect()[0]), _ring_figures(sparse.collect()[0])
    assert a == b and (a.state, a.steps_total) == ("finished", 9900)


def _ring_figures(job: JobSnapshot) -> JobSnapshot:
    """What the ring gives: the process's memory and pressure, read by each collector from
    /proc and its cgroup a moment apart, are the kernel's, and differ between two reads."""
    return replace(job, memory=None, pressure=None)


def test_spans_read_against_a_writer_flat_out_match_the_records_exactly(tmp_path):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    writer = ctx.Process(target=ring_helpers.writer_proc,
                         args=(str(tmp_path / "ring"), 4096, 3.5, False, queue))  # fmt: skip
    writer.start()
    path = queue.get(timeout=10)
    reader = ctx.Process(target=ring_helpers.totals_reader_proc, args=(path, 3.0, queue))
    reader.start()
    results = [queue.get(timeout=60) for _ in range(2)]
    for p in (writer, reader):
        p.join(timeout=30)
    written = next(r for r in results if isinstance(r, int))
    spans, wrong = next(r for r in results if not isinstance(r, int))
    assert written > 10_000 and spans > 10
    assert wrong == 0
