"""Writer and reader processes for the ring tests: deterministic content makes tearing visible."""

from __future__ import annotations

import os
import time
from pathlib import Path

from traintop.collectors.ring_reader import Record, open_segment
from traintop.ring import RingWriter

PHASES = ("data", "forward", "backward")


def fields(i: int) -> tuple:
    """Every field of record ``i`` is a function of i, so a mix of two records never matches."""
    return (i, 7 * i + 1, (i + 1, 2 * i + 3, 3 * i + 5), i % 4096, 11 * i, 13 * i)


def write(writer: RingWriter, i: int) -> None:
    step, t0, phases, samples, gpu, mem = fields(i)
    writer.record(step, t0, phases, samples, gpu_ns=gpu, mem_bytes=mem)


def consistent(rec: Record) -> bool:
    i = rec.seq - 1
    step, t0, phases, samples, gpu, mem = fields(i)
    actual = (rec.step, rec.t_start_ns, rec.phase_ns, rec.samples, rec.gpu_ns, rec.mem_bytes)
    return actual == (step, t0, phases, samples, gpu, mem)


def writer_proc(directory: str, capacity: int, seconds: float, crc: bool, queue) -> None:
    """Write flat out for ``seconds``; reports the path first and the count at the end."""
    w = RingWriter.create(name="stress", phases=PHASES, capacity=capacity, directory=directory,
                          crc=crc)  # fmt: skip
    queue.put(str(w.path))
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        for _ in range(1000):
            write(w, i)
            i += 1
    queue.put(i)
    w.close()


def reader_proc(path: str, seconds: float, queue) -> None:
    """Poll as fast as possible, verify every returned record, report the accounting."""
    seg = open_segment(path)
    start = seg.next_index
    returned = lost = rejected = torn = 0
    last = start - 1
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        result = seg.poll()
        lost, rejected = lost + result.lost, rejected + result.rejected
        for rec in result.records:
            returned += 1
            torn += not consistent(rec) or rec.seq - 1 <= last
            last = rec.seq - 1
    queue.put((returned, lost, rejected, torn, seg.next_index - start))


def wrong_order_reader_proc(path: str, seconds: float, queue) -> None:
    """NEGATIVE CONTROL: reads a slot's tags first and its body afterwards (no re-check)."""
    seg = open_segment(path)
    fd, cap = os.open(path, os.O_RDONLY), seg.header.capacity
    accepted = torn = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        head = int.from_bytes(os.pread(fd, 8, 1024), "little")
        for i in range(max(0, head - cap + 1), head):
            off = 4096 + (i & (cap - 1)) * 128
            seq = int.from_bytes(os.pread(fd, 8, off), "little")
            seq_end = int.from_bytes(os.pread(fd, 8, off + 120), "little")
            body = os.pread(fd, 128, off)
            if seq == seq_end == i + 1:
                accepted += 1
                rec = _unpack(body, i + 1)
                torn += not consistent(rec)
    queue.put((accepted, torn))


def _unpack(body: bytes, seq: int) -> Record:
    from traintop.ring_format import RECORD

    v = RECORD.unpack(body)
    return Record(seq, v[1], v[2], v[3:6], *v[11:17])


def make_segment(directory: Path | None, **kwargs) -> RingWriter:
    """A segment in ``directory`` (None: $TRAINTOP_RING_DIR or the default location)."""
    kwargs.setdefault("name", "job")
    kwargs.setdefault("phases", PHASES)
    return RingWriter.create(directory=None if directory is None else str(directory), **kwargs)


def expected_sums(lo: int, hi: int) -> tuple[tuple[int, ...], int, int]:
    """Phase sums, samples and batches of the records [lo, hi) that ``write`` writes."""
    n = hi - lo
    ramp = (hi - 1) * hi // 2 - (lo - 1) * lo // 2  # sum of i over [lo, hi)
    samples = [i % 4096 for i in range(lo, hi)]
    return (ramp + n, 2 * ramp + 3 * n, 3 * ramp + 5 * n), sum(samples), n - samples.count(0)


def totals_reader_proc(path: str, seconds: float, queue) -> None:
    """Poll for the newest 32 records only; check every span's totals against the closed form."""
    seg = open_segment(path)
    spans = wrong = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = seg.next_index
        span = seg.poll(newest=32).span
        if span is not None:
            spans += 1
            got = (span.totals.phase_ns, span.totals.samples, span.totals.batches)
            wrong += got != expected_sums(start, start + span.steps)
    queue.put((spans, wrong))


def without_token(job_id: str) -> str:
    """A job id without its run's own token (``#1a2b3c4d``, traintop/run_token.py), which its
    ranks agree on through their store: the same for every rank, another for the next run."""
    head, _, rest = job_id.partition("#")
    if not rest:
        return job_id
    token, _, world = rest.partition("/")
    assert len(token) == 8 and int(token, 16) >= 0, job_id
    return f"{head}/{world}"
