"""Step records in a recording: the ring's own 128-byte records, delta-coded, byte-shuffled and
deflated, and restored bit for bit.

Keeping the records exactly as the probe published them makes the step history lossless and
lets every reader of the ring format read them back.  Two reversible transforms make them
compress, both from what the fields are:
- counters that climb by one (seq, step, seq_end) are stored as their difference from the
  record before (1, 1, 1, ...); a step starts where the previous one ended, so its start time is
  stored as the gap after that end (0 when steps follow one another, as they do);
- byte *i* of every record is grouped together (the HDF5/Blosc "shuffle" filter), which puts the
  constant high-order bytes of every field in long runs that deflate stores almost for free.
A second of one rank is only ten records, too few for deflate to learn from, so each block is
deflated with the rank's previous block as its dictionary (every ``KEY_EVERY``-th stands alone).
"""

from __future__ import annotations

import array

from traintop import ring_format as ring
from traintop.collectors.ring_records import RecordBlock
from traintop.store import deflate

KEY_EVERY = 60
WORDS = ring.RECORD_SIZE // 8
SEQ, STEP, T_START, PHASE0, SEQ_END = 0, 1, 2, 3, WORDS - 1
MASK = (1 << 64) - 1


def pack(raw: bytes, previous: bytes | None = None) -> tuple[bytes, bytes]:
    """Delta-code, shuffle and deflate a run of whole records (against the ``previous`` block's
    shuffled bytes); the blob, and this block's shuffled bytes for the next one."""
    size = ring.RECORD_SIZE
    if len(raw) % size:
        raise ValueError(f"{len(raw)} bytes is not a whole number of {size}-byte records")
    words = array.array("Q", raw)
    for i in range(len(raw) // size - 1, 0, -1):
        _delta(words, i, -1)
    coded = words.tobytes()
    shuffled = b"".join(coded[i::size] for i in range(size))
    return deflate.pack(shuffled, previous), shuffled


def unpack(
    blob: bytes, count: int, n_phases: int, previous: bytes | None = None
) -> tuple[RecordBlock, bytes]:
    """The records ``pack`` stored, as the same column-wise block the ring reader returns, and
    the shuffled bytes the next block was deflated against."""
    shuffled = deflate.unpack(blob, previous)
    if len(shuffled) != count * ring.RECORD_SIZE:
        raise ValueError(f"step block holds {len(shuffled)} bytes, expected {count} records")
    words = array.array("Q", b"".join(shuffled[r::count] for r in range(count)))
    for i in range(1, count):
        _delta(words, i, +1)
    return RecordBlock(words.tobytes(), n_phases), shuffled


def _delta(words: array.array, i: int, sign: int) -> None:
    """Code (sign -1) or decode (+1) record ``i`` against record ``i - 1`` (already decoded)."""
    here, before = i * WORDS, (i - 1) * WORDS
    for col in (SEQ, STEP, SEQ_END):
        words[here + col] = (words[here + col] + sign * words[before + col]) & MASK
    end = words[before + T_START] + sum(words[before + PHASE0 : before + PHASE0 + 8])
    words[here + T_START] = (words[here + T_START] + sign * end) & MASK
