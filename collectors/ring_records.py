"""Ring records on the monitor side: the row type, a column-wise block, and the acceptance rule.

A record is accepted only if its first and last words both hold its index + 1 (and, with
FLAG_CRC, its crc matches); see docs/ring-format.md.  The common case is checked on whole
columns without a Python object per record, which keeps a 4096-record read well under 100 us.
"""

from __future__ import annotations

import array
import functools
import struct
from collections.abc import Iterator
from typing import Literal, NamedTuple

from traintop import ring_format as ring
from traintop.collectors import ring_columns
from traintop.collectors.ring_columns import Totals

_WORDS = ring.RECORD_SIZE // 8


class Record(NamedTuple):
    """One step as the training process published it (times in ns of CLOCK_MONOTONIC)."""

    seq: int
    step: int
    t_start_ns: int
    phase_ns: tuple[int, ...]
    samples: int
    flags: int
    gpu_lag: int
    gpu_ns: int
    mem_bytes: int
    tokens: int


class RecordBlock:
    """Validated consecutive records held as raw bytes, read column-wise without per-row objects.

    Column access costs a C-level strided copy, so a collector can aggregate thousands of records
    per tick cheaply; iterating yields ``Record`` tuples for code that wants rows.
    """

    __slots__ = ("_data", "_n_phases")

    def __init__(self, data: bytes | bytearray, n_phases: int) -> None:
        self._data = data  # a reader's copy buffer is handed on as it is, never written again
        self._n_phases = n_phases

    def __len__(self) -> int:
        return len(self._data) // ring.RECORD_SIZE

    @property
    def n_phases(self) -> int:
        return self._n_phases

    def raw(self) -> bytes:
        """The validated records as published (128 bytes each), for a lossless recording.

        The reader's buffer becomes bytes here, once: only a recorder pays that copy.
        """
        if isinstance(self._data, bytearray):
            self._data = bytes(self._data)
        return self._data

    def __iter__(self) -> Iterator[Record]:
        n = self._n_phases
        for v in ring.RECORD.iter_unpack(self._data):
            yield Record(v[0], v[1], v[2], v[3 : 3 + n], *v[11:17])

    def _col(self, fmt: Literal["q", "Q", "I", "H"], index: int) -> list[int]:
        return memoryview(self._data).cast(fmt)[index :: _PER_RECORD[fmt]].tolist()

    def seq(self) -> list[int]:
        return self._col("Q", 0)

    def steps(self) -> list[int]:
        return self._col("q", 1)

    def t_start_ns(self) -> list[int]:
        return self._col("Q", 2)

    def phase_ns(self, phase: int) -> list[int]:
        return self._col("Q", 3 + phase)

    def phase_sum(self, phase: int) -> int:
        """One phase's total: summed off the strided view, no list of the column in between."""
        return sum(memoryview(self._data).cast("Q")[3 + phase :: _WORDS])

    def totals(self) -> Totals:
        """Every column total one poll adds to a window (``traintop.collectors.ring_columns``)."""
        return ring_columns.totals(self, self._data, self._n_phases)

    def samples(self) -> list[int]:
        return self._col("I", 22)

    def flags(self) -> list[int]:
        return self._col("H", 46)

    def gpu_ns(self) -> list[int]:
        return self._col("Q", 12)

    def mem_bytes(self) -> list[int]:
        return self._col("Q", 13)

    def tokens(self) -> list[int]:
        return self._col("I", 28)

    def joined(self, then: RecordBlock) -> RecordBlock:
        """This block followed by ``then`` (consecutive reads of one segment)."""
        return RecordBlock(self._data + then._data, self._n_phases)

    def t_start_ns_at(self, i: int) -> int:
        """One record's start, without copying a column (binary searches, first and last)."""
        offset = i * ring.RECORD_SIZE + 16
        return int.from_bytes(self._data[offset : offset + 8], "little")

    def tail(self, count: int) -> RecordBlock:
        """The newest ``count`` records (this block itself when that is all of them)."""
        if count >= len(self):
            return self
        return RecordBlock(self._data[len(self._data) - count * ring.RECORD_SIZE :], self._n_phases)

    def tail_from(self, t_start_ns: int) -> RecordBlock:
        """The records that started at ``t_start_ns`` or later (starts are in step order)."""
        lo, hi = 0, len(self)
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if self.t_start_ns_at(mid) < t_start_ns else (lo, mid)
        return self.tail(len(self) - lo)

    def flag_column(self, flag: int) -> bytes | bytearray:
        """1 or 0 per record for one flag bit (below 256), as bytes: C-level count and compress."""
        return self._data[_FLAGS_BYTE :: ring.RECORD_SIZE].translate(_BIT_TABLES[flag])

    def last_mem_bytes(self, default: int | None) -> int | None:
        """mem_bytes of the newest record that carries a memory reading, else ``default``."""
        i = self.flag_column(ring.FLAG_MEM_VALID).rfind(1)
        if i < 0:
            return default
        offset = i * ring.RECORD_SIZE + 104
        return int.from_bytes(self._data[offset : offset + 8], "little")


def concatenated(blocks: list[RecordBlock]) -> RecordBlock:
    """Consecutive blocks of one segment (at least one) as one block, copied once."""
    if len(blocks) == 1:
        return blocks[0]
    return RecordBlock(b"".join(block._data for block in blocks), blocks[0].n_phases)


_PER_RECORD = {fmt: ring.RECORD_SIZE // struct.calcsize(fmt) for fmt in "qQIH"}  # items/record
_FLAGS_BYTE = 92  # low byte of the u16 flags
_BIT_TABLES = {
    bit: bytes(1 if value & bit else 0 for value in range(256))
    for bit in (ring.FLAG_GPU_VALID, ring.FLAG_MEM_VALID)
}


def validated(buf: bytearray, first_index: int, crc: bool) -> tuple[bytes | bytearray, int]:
    """Keep records whose tags (and crc) match their index.

    The common case (no crc, nothing torn) never makes a Python object per record: the seq and
    seq_end columns are compared with each other and with ``first_index+1, first_index+2, ...``
    as whole columns (``_all_in_order``).  Then ``buf``
    itself is the result: no second copy of what the reader just read.
    """
    count = len(buf) // ring.RECORD_SIZE
    if not crc and _all_in_order(buf, first_index + 1, count):
        return buf, 0
    return _validated_slowly(memoryview(buf), first_index, crc, count)


def _all_in_order(buf: bytearray, first: int, count: int) -> bool:
    """True if both tags of every record hold ``first``, ``first + 1``, ... in turn (by numpy
    for a big poll, as one big integer otherwise)."""
    big = ring_columns.is_run(buf, first)
    if big is not None:
        return big
    words = memoryview(buf).cast("Q")
    seqs, ends = words[0::_WORDS].tobytes(), words[_WORDS - 1 :: _WORDS].tobytes()
    return seqs == ends and _is_run(seqs, first, count)


def _is_run(column: bytes, first: int, count: int) -> bool:
    """True if the little-endian u64 column holds exactly first, first+1, ..., first+count-1.

    Word i of the column as an integer is sum(v_i << 64i); the expected run is
    first * ONES + RAMP, with no carries because every value fits in 64 bits.
    """
    ones, ramp = _run_constants(count)
    return int.from_bytes(column, "little") == first * ones + ramp


@functools.lru_cache(maxsize=16)
def _run_constants(count: int) -> tuple[int, int]:
    """ONES and RAMP for ``count`` words; "last N" reads hit the cache, small polls are cheap."""
    ramp = _ramp_bytes(max(_MIN_RAMP, 1 << (count - 1).bit_length()))
    return int.from_bytes(_ONE_WORD * count, "little"), int.from_bytes(ramp[: 8 * count], "little")


@functools.lru_cache(maxsize=4)
def _ramp_bytes(length: int) -> bytes:
    """0, 1, 2, ... as u64 words: built once per power-of-two length, sliced per poll."""
    return array.array("Q", range(length)).tobytes()


_ONE_WORD = (1).to_bytes(8, "little")
_MIN_RAMP = 4096


def _validated_slowly(view: memoryview, first_index: int, crc: bool, count: int):
    """Per-record check, for crc segments and for copies where something was torn."""
    words = view.cast("Q")
    seqs, ends = words[0::_WORDS].tolist(), words[_WORDS - 1 :: _WORDS].tolist()
    size = ring.RECORD_SIZE
    keep = [
        view[i * size : (i + 1) * size]
        for i in range(count)
        if seqs[i] == ends[i] == first_index + i + 1
        and (not crc or _crc_ok(view[i * size : (i + 1) * size]))
    ]
    return b"".join(keep), count - len(keep)


def _crc_ok(record: memoryview) -> bool:
    stored = int.from_bytes(record[ring.RECORD_CRC_OFFSET : ring.RECORD_CRC_OFFSET + 4], "little")
    return stored == ring.record_crc(record)
