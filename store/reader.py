"""Reading a recording: its samples in time order, the verdict of each, and the step records.

Every failure to read (missing, foreign, truncated or newer file) becomes a one-line
``StoreError``.  A file whose recorder was killed still opens: SQLite rolls its WAL forward, so
the reader sees every committed second.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from traintop.collectors.ring_records import RecordBlock
from traintop.collectors.snapshot import Snapshot
from traintop.diagnosis.model import Verdict
from traintop.store import frames, schema, steps
from traintop.store.codec import Decoder
from traintop.store.schema import StoreError

SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True, slots=True)
class SampleRow:
    """Where one sample sits in the file; ``t`` is wall-clock seconds since the epoch."""

    id: int
    t: float
    key_id: int


@dataclass(frozen=True, slots=True)
class RecordedSegment:
    """One rank's ring segment as the recorder first saw it."""

    id: int
    job_id: str
    name: str
    pid: int
    rank: int
    world_size: int
    phases: tuple[str, ...]
    data_phase: int | None
    clock_offset_ns: int  # add to a record's CLOCK_MONOTONIC ns to get wall-clock ns


class Recording:
    """An open recording; not thread-safe (the replay source owns one on its own thread)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._conn = _connect(self.path)
        try:
            self.version = schema.check(self._conn, self.path.name)
            self.meta = dict(self._conn.execute("SELECT key, value FROM meta"))
            self._decoder = Decoder(json.loads(self.meta["schema"]))
            self.samples = [SampleRow(*row) for row in self._conn.execute(
                "SELECT id, t, key_id FROM samples ORDER BY id")]  # fmt: skip
        except (sqlite3.Error, KeyError, ValueError) as exc:
            self._conn.close()
            raise StoreError(f"{self.path.name}: damaged or truncated recording ({exc})") from None
        self._cache: tuple[int, frames.Frame] | None = None

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sample(self, index: int) -> tuple[Snapshot, Verdict | None]:
        """The snapshot and verdict at position ``index`` (0-based) of ``samples``."""
        row = self.samples[index]
        try:
            return frames.from_json(self._frame(row), self._decoder)
        except (sqlite3.Error, ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{self.path.name}: sample {row.id} is damaged ({exc})") from None

    def _frame(self, row: SampleRow) -> frames.Frame:
        """Decode from the key frame, or from the frame before when that was the last one read."""
        start = row.key_id
        previous = None
        if self._cache is not None and row.key_id <= self._cache[0] < row.id:
            start, previous = self._cache[0] + 1, self._cache[1]
        blobs = self._conn.execute(
            "SELECT id, frame FROM samples WHERE id BETWEEN ? AND ? ORDER BY id", (start, row.id)
        )
        for sample_id, blob in blobs:
            previous = frames.decompress(blob, None if sample_id == row.key_id else previous)
        if previous is None:
            raise ValueError("frame missing")
        self._cache = (row.id, previous)
        return previous

    def verdict_timeline(self) -> list[tuple[int, str]]:
        """(sample id, primary bottleneck) of every sample that has a verdict."""
        return list(self._conn.execute("SELECT sample_id, bottleneck FROM verdicts ORDER BY 1"))

    def segments(self) -> list[RecordedSegment]:
        rows = self._conn.execute(
            "SELECT id, job_id, name, pid, rank, world_size, phases, data_phase, "
            "created_realtime_ns - created_monotonic_ns FROM segments ORDER BY name, rank, id"
        )
        return [RecordedSegment(i, job, name, pid, rank, world, tuple(json.loads(phases)), data, at)
                for i, job, name, pid, rank, world, phases, data, at in rows]  # fmt: skip

    def start(self) -> float | None:
        """The earliest moment recorded, in epoch seconds: the first sample, or a step before it
        (the ring still held steps taken before the recording started)."""
        row = self._conn.execute(
            "SELECT MIN(t_first_ns + created_realtime_ns - created_monotonic_ns) "
            "FROM steps JOIN segments ON segments.id = steps.segment_id").fetchone()  # fmt: skip
        times = [row[0] / 1e9] if row[0] is not None else []
        times += [self.samples[0].t] if self.samples else []
        return min(times) if times else None

    def step_counts(self) -> dict[int, int]:
        """Records kept per segment id."""
        return dict(self._conn.execute("SELECT segment_id, SUM(count) FROM steps GROUP BY 1"))

    def steps(
        self, segment: RecordedSegment, t0: float | None = None, t1: float | None = None
    ) -> Iterator[RecordBlock]:
        """The segment's step records, in order; ``t0``/``t1`` bound them in wall-clock seconds."""
        lo = -(2**63) if t0 is None else int(t0 * 1e9) - segment.clock_offset_ns
        hi = 2**63 - 1 if t1 is None else int(t1 * 1e9) - segment.clock_offset_ns
        rows = self._conn.execute(
            "SELECT first_seq, key_seq, count, t_last_ns, records FROM steps "
            "WHERE segment_id = ?1 AND t_first_ns <= ?3 AND first_seq >= COALESCE(("
            "SELECT key_seq FROM steps WHERE segment_id = ?1 AND t_last_ns >= ?2 "
            "ORDER BY first_seq LIMIT 1), 0) ORDER BY first_seq", (segment.id, lo, hi))  # fmt: skip
        previous = None
        for first_seq, key_seq, count, t_last, blob in rows:
            block, previous = steps.unpack(blob, count, len(segment.phases),
                                           None if first_seq == key_seq else previous)  # fmt: skip
            if t_last >= lo:
                yield block


def _connect(path: Path) -> sqlite3.Connection:
    """Open read-only where possible; refuse what is not SQLite before SQLite guesses."""
    try:
        with path.open("rb") as fh:
            magic = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise StoreError(f"{path}: {exc.strerror or exc}") from None
    if magic != SQLITE_MAGIC:
        what = "empty file" if not magic else "not a traintop recording"
        raise StoreError(f"{path.name}: {what}")
    mode = "rw" if os.access(path, os.W_OK) and os.access(path.parent, os.W_OK) else "ro"
    try:
        return sqlite3.connect(
            f"file:{quote(str(path))}?mode={mode}", uri=True, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise StoreError(f"{path.name}: cannot open ({exc})") from None
