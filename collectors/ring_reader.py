"""Monitor-side reader of ring segments (format v1, docs/ring-format.md).

Reads with ``pread`` rather than mmap: a segment truncated under an mmap reader kills the monitor
with SIGBUS, while pread just returns a short read that becomes a clean ``SegmentError``.
Records are validated with the bracketed-snapshot protocol (head before and after the copy, tags
at both ends, crc when flagged) so a torn record is never returned, and every index the writer
published is accounted for as returned, lost (overrun) or rejected.  Pure stdlib.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import struct
import time
from pathlib import Path
from typing import NamedTuple

from traintop import ring_format as ring
from traintop import ring_paths
from traintop.collectors.ring_columns import BIG_POLL
from traintop.collectors.ring_header import SegmentError, SegmentHeader, parse_header
from traintop.collectors.ring_ledger import Entry, read_entries
from traintop.collectors.ring_records import Record, RecordBlock, concatenated, validated
from traintop.collectors.ring_totals import (
    Cumulative,
    Span,
    anchored,
    last_slot,
    minus,
    parsed,
    read_slot,
    safe,
)

__all__ = [
    "HotBlock",
    "PollResult",
    "Record",
    "RecordBlock",
    "Segment",
    "SegmentError",
    "Span",
    "discover",
    "open_segment",
    "remove_stale",
    "segment_paths",
]

# head .. live step, header generation, then (1.2) ledger head, helper thread id, training
# thread ident, stack signal (docs/ring-format.md); zeros in an older segment.
_HOT = struct.Struct("<17Q")
_HOT_OFFSET = ring.HEAD_WORD * 8
_MAX_HEAD_JUMP = 1 << 40  # a head this far ahead of our cursor is garbage, not progress
# A backlog is read newest first in blocks this long: each one is checked and summed without
# numpy (collectors/ring_columns.py), which a whole wrapped ring's one read imported (11 MB).
BACKLOG_BLOCK = BIG_POLL // 2


class PollResult(NamedTuple):
    """New records since the last poll, plus what this reader missed (lost) or refused.

    With a ``span``, ``records`` are only the newest of the new steps and the span accounts for
    all of them (``Segment.poll(newest=...)``).
    """

    records: RecordBlock
    lost: int
    rejected: int
    span: Span | None = None


class HotBlock(NamedTuple):
    """The writer's live words: progress, heartbeat, writer-side drops, state, current phase.

    A named tuple, not a frozen dataclass: one is made per segment per tick.
    """

    head: int
    heartbeat_ns: int
    dropped: int
    state: int
    live_phase: int
    live_start_ns: int
    live_step: int
    header_gen: int = 0  # bumped by the writer each time it rewrites the header's identity
    ledger_head: int = 0  # collectives entered (format 1.2)
    helper_tid: int = 0  # the stack helper thread's native id (0: no helper)
    train_thread: int = 0  # the training thread's ident, as a faulthandler dump names it
    stack_signal: int = 0  # the signal its faulthandler dumps on (0: none)
    alive_ns: int = 0  # the helper thread's last wake, every ALIVE_EVERY_S while it lives
    train_tid: int = 0  # the training thread's native id (0: unknown)
    first_step_ns: int = 0  # how long the first step took (0: none yet, or an older writer)
    handoff_ns: int = 0  # the trainer's time taking workers' batches in (traintop/handoff.py)
    handoffs: int = 0  # ... and how many (0: none, a pin-memory thread's, or an older writer)
    handoff_cpu_ns: int = 0  # ... of ``handoff_ns``, the trainer's thread on a CPU


class Segment:
    """An open segment: a private fd and this reader's cursor.

    The copy buffer is made per read, sized to that read: a buffer of the whole ring kept per
    segment was 512 KiB of the monitor's memory for every rank it follows (32 MB at 64 ranks).
    """

    def __init__(self, path: Path, fd: int, header: SegmentHeader) -> None:
        self.path = path
        self.header = header
        self._fd = fd
        self._mask = header.capacity - 1
        self._header_gen = 0
        self.last_hot = self.hot()  # as of the last poll: its head is where that poll stopped
        self.next_index = max(0, self.last_hot.head - header.capacity + 1)
        self._cum: Cumulative | None = None  # the writer's totals at next_index, when known

    def hot(self) -> HotBlock:
        return _hot_block(self._hot_raw())

    def _hot_raw(self) -> bytes:
        raw = os.pread(self._fd, _HOT.size, _HOT_OFFSET)
        if len(raw) != _HOT.size:
            raise SegmentError(f"{self.path}: segment truncated")
        return raw

    def follow_header(self, hot: HotBlock) -> bool:
        """Re-read the header when the writer rewrote it (``hot.header_gen`` moved on); True if
        ``header`` changed.  A copy torn by the rewrite fails its crc: kept for the next tick.

        Only the identity fields may change (rank, local rank, world size, run id: a process
        group made after the segment), so the geometry this reader was built on stays valid.
        """
        if hot.header_gen == self._header_gen:
            return False
        try:
            size = os.fstat(self._fd).st_size
            header = parse_header(self.path, os.pread(self._fd, ring.CRC_AREA_END, 0), size)
        except (SegmentError, OSError):
            return False
        self.header, self._header_gen = header, hot.header_gen
        return True

    def poll(self, newest: int | None = None, within_ns: int | None = None) -> PollResult:
        """Records published since the previous poll; raises SegmentError if the file went bad.

        Updates ``last_hot``.  Nothing new costs one read: the hot block that gave the head.
        With ``newest``, a poll of more new records than that returns only the newest
        ``newest`` with a ``span`` of them all, from the writer's totals (format 1.1), when the
        totals at the cursor are known: the first poll, a 1.0 or crc segment, a slow writer
        and any doubt about a copy read every record, as without ``newest``.  ``within_ns``:
        the caller keeps only the records that started within that long of the newest one (a
        window), so of such a read the older ones are skipped, not read and not lost.
        """
        raw = self._hot_raw()
        h1, start = int.from_bytes(raw[:8], "little"), self.next_index
        if h1 < start or h1 - start > _MAX_HEAD_JUMP:
            raise SegmentError(f"{self.path}: head moved from {start} to {h1}: segment corrupt")
        if h1 == start:
            self.last_hot = _hot_block(raw)
            return PollResult(RecordBlock(b"", len(self.header.phases)), 0, 0)
        cum = self._cum if self._cum is not None and self._cum.at == start else None
        if newest is not None and cum is not None and h1 - start > newest:
            sparse = self._poll_newest(h1, newest, cum)
            if sparse is not None:
                return sparse
        lo = max(start, h1 - self.header.capacity + 1)
        # A writer this fast may need ``newest`` next time: learn its totals at h1 now.
        anchor = newest is not None and self.header.totals and h1 - start > newest // 2
        if within_ns is None or h1 - lo <= BACKLOG_BLOCK:
            block, overrun, rejected, slot = self._snapshot(lo, h1, anchor)
        else:
            block, overrun, rejected, slot = self._backlog(lo, h1, anchor, within_ns)
        self.next_index = h1
        self._cum = None
        if anchor and not rejected:  # every record [h1 - len(block), h1) is at hand
            self._cum = anchored(slot, block, h1, self.last_hot.head)
        return PollResult(block, lo - start + overrun, rejected)

    def _poll_newest(self, h1: int, newest: int, cum: Cumulative) -> PollResult | None:
        """The steps up to the newest totals slot (at most h1): its newest records and the
        totals, copied between two reads of the head; None if either may be torn.  ``cum``:
        the totals at the cursor.  The few steps after the slot are left for the next poll."""
        start, at, n_phases = self.next_index, last_slot(h1), len(self.header.phases)
        if at - start <= newest:
            return None
        raw, buf = read_slot(self._fd, at), self._copy(at - newest, at)
        self.last_hot = self.hot()
        slot = parsed(raw, at, n_phases)
        data, rejected = validated(buf, at - newest, False)
        if slot is None or not safe(slot, self.last_hot.head) or rejected:
            return None
        block = RecordBlock(data, n_phases)
        totals = minus(slot.totals, cum.totals)
        if min(*totals.phase_ns, *totals[1:]) < 0:  # sums that went down: not our writer's
            return None
        span = Span(at - start, totals, block.last_mem_bytes(slot.mem_bytes))
        self._cum, self.next_index = Cumulative(at, slot.totals), at
        return PollResult(block, 0, 0, span)

    def _backlog(
        self, lo: int, h1: int, anchor: bool, within_ns: int
    ) -> tuple[RecordBlock, int, int, bytes]:
        """``_snapshot(lo, h1, anchor)`` as far back as a record that started ``within_ns``
        before the newest one, read newest first in blocks of ``BACKLOG_BLOCK``: a monitor
        that attaches to a job running for minutes reads its window, not its whole ring, and
        its memory does not grow with the job's age.  Overrun: as ``_snapshot``'s, from ``lo``
        (a block the writer overtook ends the read; the older records are gone too)."""
        parts: list[RecordBlock] = []
        hi, rejected, slot, edge = h1, 0, b"", None
        while hi > lo:
            part_lo = max(lo, hi - BACKLOG_BLOCK)
            part, overrun, bad, raw = self._snapshot(part_lo, hi, anchor and hi == h1)
            parts.append(part)
            rejected, slot = rejected + bad, slot or raw
            if overrun:
                return concatenated(parts[::-1]), part_lo - lo + overrun, rejected, slot
            if len(part):
                edge = part.t_start_ns_at(len(part) - 1) - within_ns if edge is None else edge
                if part.t_start_ns_at(0) < edge:
                    break
            hi = part_lo
        return concatenated(parts[::-1]), 0, rejected, slot

    def last(self, n: int) -> RecordBlock:
        """The newest ``n`` (at most capacity - 1) valid records, without moving the cursor."""
        h1 = self.hot().head
        lo = max(0, h1 - max(0, n), h1 - self.header.capacity + 1)
        return self._snapshot(lo, h1)[0]

    def _snapshot(
        self, lo: int, h1: int, anchor: bool = False
    ) -> tuple[RecordBlock, int, int, bytes]:
        """Copy [lo, h1), re-read head, keep only indices the writer cannot have touched.

        The second head comes with the whole hot block (``last_hot``): one read, not two.
        ``anchor`` also copies the slot of the totals at h1 in between (else it comes back
        empty).
        """
        buf = self._copy(lo, h1)
        slot = read_slot(self._fd, last_slot(h1)) if anchor else b""
        self.last_hot = self.hot()
        safe_lo = min(h1, max(lo, self.last_hot.head - self.header.capacity + 1))
        if safe_lo > lo:
            del buf[: (safe_lo - lo) * ring.RECORD_SIZE]
        data, rejected = validated(buf, safe_lo, self.header.crc)
        return RecordBlock(data, len(self.header.phases)), safe_lo - lo, rejected, slot

    def _copy(self, lo: int, hi: int) -> bytearray:
        """pread slots of indices [lo, hi) into a new buffer in index order (two reads if
        wrapped)."""
        count = hi - lo
        first_slot = lo & self._mask
        first = min(count, self.header.capacity - first_slot)
        size = ring.RECORD_SIZE
        buf = bytearray(count * size)
        view = memoryview(buf)
        self._read_into(view[: first * size], ring.HEADER_SIZE + first_slot * size)
        if count > first:
            self._read_into(view[first * size :], ring.HEADER_SIZE)
        return buf

    def _read_into(self, view: memoryview, offset: int) -> None:
        if view.nbytes and os.preadv(self._fd, [view], offset) != view.nbytes:
            raise SegmentError(f"{self.path}: segment truncated")

    def ledger(self) -> list[Entry]:
        """The collective ledger's valid entries, oldest first ([] for a segment older than
        format 1.2, which keeps none)."""
        if not self.header.ledger:
            return []
        return read_entries(self.pread, self._ledger_head)

    def _ledger_head(self) -> int:
        raw = self.pread(8, ring.LEDGER_HEAD_WORD * 8)
        return int.from_bytes(raw, "little") if len(raw) == 8 else 0

    def pread(self, size: int, offset: int) -> bytes:
        """``size`` bytes of the segment at ``offset`` (fewer at its end)."""
        return os.pread(self._fd, size, offset)

    def liveness(self, stepped: bool = False) -> str:
        """ "live", "finished" (closed cleanly) or "crashed", from the writer's flock first.

        The kernel drops the flock when the writer dies, even on SIGKILL; pid + start time only
        catch the rare case of a forked child still holding the inherited lock, and are not
        read when the writer just ``stepped`` (published records: forked children never do).
        """
        try:
            fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return "crashed" if not stepped and self.header.writer_gone() else "live"
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        return "finished" if self.hot().state == ring.STATE_CLOSED else "crashed"

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def inode(self) -> int:
        """Identity of the opened file, to notice a replacement under the same name."""
        return os.fstat(self._fd).st_ino

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Segment:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _hot_block(raw: bytes) -> HotBlock:
    head, beat, dropped, state, live, live_step, gen, *helper = _HOT.unpack(raw)
    phase, start_ns = live & ring.LIVE_PHASE_BITS, live & ~ring.LIVE_PHASE_BITS
    return HotBlock(head, beat, dropped, state, phase, start_ns, live_step, gen, *helper)


def open_segment(path: str | os.PathLike[str]) -> Segment:
    """Open and validate a segment; SegmentError (one line) for anything foreign or corrupt."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SegmentError(f"{path}: cannot open: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        _check_file(path, st)
        header = parse_header(path, os.pread(fd, ring.CRC_AREA_END, 0), st.st_size)
        return Segment(path, fd, header)
    except BaseException:
        os.close(fd)
        raise


def _check_file(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise SegmentError(f"{path}: not a regular file")
    problem = ring_paths.not_private(path, st)
    if problem:
        raise SegmentError(problem)


def discover(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """Segment paths in every private directory a writer may have used (names only)."""
    return [Path(path) for path in segment_paths(directory)]


def segment_paths(directory: str | os.PathLike[str] | None = None) -> list[str]:
    """``discover()`` as strings, for a caller that lists every tick: a Path costs more than
    the rest of the listing, and hashing one more again."""
    found: list[str] = []
    for candidate in ring_paths.candidate_dirs(directory):
        try:
            ring_paths.check_private_dir(candidate)
        except (OSError, ring_paths.RingDirError):
            continue
        found.extend(ring_paths.segment_names(candidate))
    return found


def remove_stale(directory: str | None = None, max_age_s: float = 600.0) -> list[Path]:
    """Unlink finished or crashed segments (and abandoned .tmp files) idle for ``max_age_s``.

    Never touches a locked (live) segment, a file we do not own, or anything not ours by name;
    re-checks the inode right before unlinking so a replacement is never removed.
    """
    removed = []
    for path in discover(directory):
        with contextlib.suppress(SegmentError, OSError), open_segment(path) as seg:
            idle = seg.liveness() != "live" and seg.header.idle_s(seg.hot()) > max_age_s
            if idle and os.lstat(path).st_ino == seg.inode():
                os.unlink(path)
                removed.append(path)
                removed += ring_paths.remove_side_files(path)
    return removed + _remove_stale_tmp(directory, max_age_s) + _remove_orphans(directory, max_age_s)


def _remove_orphans(directory: str | None, max_age_s: float) -> list[Path]:
    """Side files whose segment is gone (a writer killed before its cleanup, a segment another
    budget removed), once as old as the grace period; no segment needs them any more."""
    removed = []
    for candidate in ring_paths.candidate_dirs(directory):
        for path in ring_paths.orphan_side_files(candidate):
            with contextlib.suppress(OSError):
                if time.time() - os.lstat(path).st_mtime > max_age_s:
                    os.unlink(path)
                    removed.append(path)
    return removed


def _remove_stale_tmp(directory: str | None, max_age_s: float) -> list[Path]:
    """A writer that died during init leaves only a .tmp file; drop it after the grace period."""
    removed = []
    for candidate in ring_paths.candidate_dirs(directory):
        with contextlib.suppress(OSError), os.scandir(candidate) as entries:
            for entry in entries:
                if not entry.name.startswith(ring_paths.TMP_PREFIX):
                    continue
                st = entry.stat(follow_symlinks=False)
                ours = stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()
                if ours and time.time() - st.st_mtime > max_age_s:
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed
