"""Column totals of a block of ring records: what one poll adds to a job's window.

A trainer can publish thousands of steps a second.  Summed in Python, each record costs an int
object per column (about 0.3 ms per rank per tick at 2,000 steps/s, which alone is over the
monitor's budget); numpy sums the same columns in C in a tenth of that.  numpy costs the
monitor 15 MB of memory and 0.1 s to import, so it is imported only when a poll is big
(``BIG_POLL`` records): a job at tens of steps a second never loads it, and both ways give the
same totals exactly (``tests/test_ring_columns.py``).
"""

from __future__ import annotations

from itertools import compress
from typing import TYPE_CHECKING, NamedTuple, Protocol

from traintop import ring_format as ring

if TYPE_CHECKING:
    import numpy as np

BIG_POLL = 256  # records from which numpy sums faster than Python's int per value
_WORDS = ring.RECORD_SIZE // 8  # u64 words per record
_PHASE_WORD, _GPU_WORD = 3, 12  # word offsets of phase_ns[0] and gpu_ns
_SAMPLES_U32, _FLAGS_U16 = 22, 46  # offsets of samples (u32 units) and flags (u16 units)


class Totals(NamedTuple):
    """Sums of one block's columns; GPU time only of the steps that carry a measurement."""

    phase_ns: tuple[int, ...]
    samples: int
    batches: int  # steps that counted samples (a step with none fetched no batch)
    gpu_ns: int
    gpu_steps: int


class Columns(Protocol):
    """The column reads a block of records offers (``ring_records.RecordBlock`` has them)."""

    def __len__(self) -> int: ...

    def phase_sum(self, phase: int) -> int: ...

    def samples(self) -> list[int]: ...

    def gpu_ns(self) -> list[int]: ...

    def flag_column(self, flag: int) -> bytes | bytearray: ...


def totals(block: Columns, data: bytes | bytearray, n_phases: int) -> Totals:
    """The column sums of ``block`` (whose records are ``data``), by numpy for a big poll."""
    if len(block) >= BIG_POLL:
        found = _numpy_totals(data, n_phases)
        if found is not None:
            return found
    return _python_totals(block, n_phases)


def is_run(data: bytes | bytearray, first: int) -> bool | None:
    """For a big block: whether both tags of record i hold ``first + i`` (None: not big)."""
    count = len(data) // ring.RECORD_SIZE
    if count < BIG_POLL:
        return None
    import numpy as np

    words = np.frombuffer(data, dtype="<u8").reshape(count, _WORDS)
    seq = words[:, 0]
    expected = np.arange(first, first + count, dtype=np.uint64)
    return bool(np.array_equal(seq, words[:, _WORDS - 1]) and np.array_equal(seq, expected))


def _python_totals(block: Columns, n_phases: int) -> Totals:
    samples = block.samples()
    gpu_valid = block.flag_column(ring.FLAG_GPU_VALID)
    gpu_steps = gpu_valid.count(1)
    gpu_ns = 0
    if gpu_steps:  # a CPU-only job's GPU column is never read
        gpu = block.gpu_ns()
        gpu_ns = sum(gpu) if gpu_steps == len(gpu) else sum(compress(gpu, gpu_valid))
    return Totals(
        phase_ns=tuple(block.phase_sum(i) for i in range(n_phases)),
        samples=sum(samples),
        batches=len(samples) - samples.count(0),
        gpu_ns=gpu_ns,
        gpu_steps=gpu_steps,
    )


def _numpy_totals(data: bytes | bytearray, n_phases: int) -> Totals | None:
    """None when a value is so large that u64 sums could wrap (Python's ints never do)."""
    import numpy as np

    count = len(data) // ring.RECORD_SIZE
    words = np.frombuffer(data, dtype="<u8").reshape(count, _WORDS)
    # One gather into contiguous rows: numpy's reductions along a 128-byte stride cost twice as
    # much as the copy and the contiguous reductions together.
    phases = np.ascontiguousarray(words[:, _PHASE_WORD : _PHASE_WORD + n_phases].T)
    valid = np.frombuffer(data, dtype="<u2")[_FLAGS_U16 :: _WORDS * 4] & ring.FLAG_GPU_VALID != 0
    gpu = words[:, _GPU_WORD][valid]
    if not (_sums_fit(phases, count) and _sums_fit(gpu, count)):
        return None
    samples = np.frombuffer(data, dtype="<u4")[_SAMPLES_U32 :: _WORDS * 2]
    return Totals(
        phase_ns=tuple(phases.sum(axis=1, dtype=np.uint64).tolist()),
        samples=int(samples.sum(dtype=np.uint64)),
        batches=int(np.count_nonzero(samples)),
        gpu_ns=int(gpu.sum(dtype=np.uint64)),
        gpu_steps=int(gpu.size),
    )


def _sums_fit(values: np.ndarray, count: int) -> bool:
    """True if no sum of ``count`` of these values can leave u64 (where numpy's would wrap)."""
    return not values.size or int(values.max()) * count < 1 << 64
