"""The recorder: takes snapshots, verdicts and step records from the sampler thread and writes
them from a thread of its own, one transaction per second.

The sampler thread only appends to a queue (no I/O, no encoding), so a slow or full disk never
delays sampling, the UI or the training process.  One commit per ``FLUSH_S`` bounds what a
SIGKILL can lose to the queued second plus the sample being taken; WAL makes each commit
durable against a crash of this process without an fsync per sample.  Any write error ends the
recording with ``error`` set to one line; the monitor goes on.
"""

from __future__ import annotations

import json
import queue
import socket
import sqlite3
import threading
import time
from pathlib import Path

from traintop.collectors.job_key import job_key
from traintop.collectors.ring_header import SegmentHeader
from traintop.collectors.ring_reader import PollResult
from traintop.collectors.snapshot import Snapshot
from traintop.diagnosis.model import Verdict
from traintop.store import frames, schema, steps
from traintop.store.codec import current_schema
from traintop.store.trim import trim

FLUSH_S = 1.0
# A sample's frame is about 3 KB: on SQLite's default 4 KiB pages one fits per page and a
# quarter of the file would be slack; 32 KiB pages hold ten.  A commit writes the three or four
# pages it touched to the WAL (about 120 KB a second).
PAGE_SIZE = 32768


def open_for_writing(path: Path, interval_s: float) -> sqlite3.Connection:
    """A new recording at ``path``; an existing file is refused rather than overwritten."""
    if path.exists():
        raise schema.StoreError(f"{path}: already exists; choose another file name")
    if not path.parent.is_dir():
        raise schema.StoreError(f"{path}: cannot record there: no such directory")
    try:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level="DEFERRED")
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        schema.create(conn, _meta(interval_s))
    except sqlite3.Error as exc:
        raise schema.StoreError(f"{path}: cannot record there: {_reason(exc)}") from None
    return conn


def _meta(interval_s: float) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        written_by = version("traintop")
    except PackageNotFoundError:
        written_by = "unknown"
    return {
        "schema": json.dumps(current_schema()),
        "created_at": repr(time.time()),
        "hostname": socket.gethostname(),
        "interval_s": repr(interval_s),
        "traintop_version": written_by,
    }


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return "the disk is full" if "full" in text else text or type(exc).__name__


class Recorder:
    """One recording in progress; ``add_*`` from the sampler thread, ``stop`` from any."""

    def __init__(self, path: str | Path, *, interval_s: float = 1.0) -> None:
        self.path = Path(path)
        self._conn = open_for_writing(self.path, interval_s)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._segments: dict[tuple, int] = {}
        self._chains: dict[int, tuple[int, bytes | None, int]] = {}  # segment: key, last, blocks
        self._previous: frames.Frame | None = None
        self.samples = 0
        self.records = 0
        self.error: str | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="traintop-recorder", daemon=True)
        self._thread.start()

    @property
    def recording(self) -> bool:
        return self.error is None and self._thread.is_alive()

    def add_sample(self, snapshot: Snapshot, verdict: Verdict | None) -> None:
        if self.error is None:
            self._queue.put((snapshot, verdict))

    def add_records(self, header: SegmentHeader, result: PollResult) -> None:
        if self.error is None:
            self._queue.put((header, result))

    def stop(self, timeout_s: float = 10.0) -> None:
        """Write what is queued, then leave a single self-contained file (no -wal beside it)."""
        self._stopping.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            while not self._stopping.wait(FLUSH_S):
                self._flush()
            self._flush()
            self._finish()
        except (sqlite3.Error, OSError, ValueError) as exc:
            self.error = f"recording to {self.path} stopped: {_reason(exc)}"
        finally:
            self._conn.close()

    def _flush(self) -> None:
        """One transaction with everything queued."""
        items = []
        while not self._queue.empty():
            items.append(self._queue.get_nowait())
        with self._conn:
            for item in items:
                self._write(item)

    def _write(self, item: tuple) -> None:
        if isinstance(item[0], Snapshot):
            self._write_sample(*item)
        else:
            self._write_records(*item)

    def _write_sample(self, snapshot: Snapshot, verdict: Verdict | None) -> None:
        snapshot = trim(snapshot)
        frame = frames.to_json(snapshot, verdict)
        key = self.samples % frames.KEY_EVERY == 0
        blob = frames.compress(frame, None if key else self._previous)
        sample_id = self.samples + 1
        key_id = sample_id if key else self._key_id
        self._conn.execute(
            "INSERT INTO samples VALUES (?, ?, ?, ?, ?)",
            (sample_id, snapshot.timestamp, snapshot.monotonic, key_id, blob),
        )
        self._key_id, self._previous, self.samples = key_id, frame, sample_id
        if verdict is not None:
            p = verdict.primary
            self._conn.execute(
                "INSERT INTO verdicts VALUES (?, ?, ?, ?, ?)",
                (sample_id, p.bottleneck, p.severity, p.confidence, p.summary),
            )

    def _write_records(self, header: SegmentHeader, result: PollResult) -> None:
        block = result.records
        if not len(block):
            return
        segment = self._segment_id(header)
        key_seq, previous, blocks = self._chains.get(segment, (0, None, 0))
        if blocks % steps.KEY_EVERY == 0:
            key_seq, previous = block.seq()[0], None
        blob, shuffled = steps.pack(block.raw(), previous)
        self._chains[segment] = (key_seq, shuffled, blocks + 1)
        starts = block.t_start_ns()
        self._conn.execute(
            "INSERT INTO steps (segment_id, first_seq, key_seq, count, lost, t_first_ns, "
            "t_last_ns, records) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (segment, block.seq()[0], key_seq, len(block), result.lost + result.rejected,
             starts[0], starts[-1], blob),
        )  # fmt: skip
        self.records += len(block)

    def _segment_id(self, h: SegmentHeader) -> int:
        key = (h.hostname, h.pid, h.instance_id, h.created_monotonic_ns)
        if key not in self._segments:
            cursor = self._conn.execute(
                "INSERT INTO segments (job_id, name, pid, rank, local_rank, world_size, "
                "hostname, phases, data_phase, created_realtime_ns, created_monotonic_ns) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job_key(h), h.name, h.pid, h.rank, h.local_rank, h.world_size, h.hostname,
                 json.dumps(h.phases), h.data_phase_index, h.created_realtime_ns,
                 h.created_monotonic_ns),
            )  # fmt: skip
            assert cursor.lastrowid is not None  # an INSERT's row
            self._segments[key] = cursor.lastrowid
        return self._segments[key]

    def _finish(self) -> None:
        """Fold the WAL back in and leave rollback-journal mode: one file, readable anywhere."""
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._conn.execute("PRAGMA journal_mode=DELETE")
