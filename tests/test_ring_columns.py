"""Column totals of a poll: numpy (big polls) and Python (small ones) agree exactly, and the
tags check of a big poll refuses what the big-integer check refuses."""

from __future__ import annotations

import random

import pytest

from traintop import ring_format as ring
from traintop.collectors import ring_columns
from traintop.collectors.ring_columns import BIG_POLL
from traintop.collectors.ring_records import RecordBlock, validated

N_PHASES = 5


def _record(index: int, rng: random.Random, big: bool = False) -> bytes:
    top = 1 << 63 if big else 10**9
    phases = [rng.randrange(top) for _ in range(ring.MAX_PHASES)]
    samples = rng.choice((0, 32, 32, 31, rng.randrange(1 << 32)))
    flags = rng.choice((0, ring.FLAG_GPU_VALID, ring.FLAG_MEM_VALID, 0xFFFF))
    gpu = rng.randrange(top)
    seq = index + 1
    return ring.RECORD.pack(seq, index, index * 1000, *phases, samples, flags, 0, gpu, 7, 3, 0, seq)


def _block(count: int, seed: int, big: bool = False) -> bytearray:
    rng = random.Random(seed)
    return bytearray(b"".join(_record(i, rng, big) for i in range(count)))


@pytest.mark.parametrize("count", [1, 2, BIG_POLL - 1, BIG_POLL, BIG_POLL + 1, 2000, 4095])
@pytest.mark.parametrize("big_values", [False, True])
def test_numpy_and_python_totals_are_equal(count: int, big_values: bool) -> None:
    data = _block(count, seed=count, big=big_values)
    block = RecordBlock(data, N_PHASES)
    by_python = ring_columns._python_totals(block, N_PHASES)
    assert block.totals() == by_python
    expected_gpu = sum(r.gpu_ns for r in block if r.flags & ring.FLAG_GPU_VALID)
    assert by_python.gpu_ns == expected_gpu
    assert by_python.phase_ns == tuple(sum(r.phase_ns[i] for r in block) for i in range(N_PHASES))
    assert by_python.batches == sum(1 for r in block if r.samples)


def test_values_that_would_wrap_u64_are_summed_by_python() -> None:
    data = _block(BIG_POLL, seed=1, big=True)
    assert ring_columns._numpy_totals(data, N_PHASES) is None  # 2**63-scale values: refused
    small = _block(BIG_POLL, seed=1)
    assert ring_columns._numpy_totals(small, N_PHASES) is not None


@pytest.mark.parametrize("count", [BIG_POLL - 1, BIG_POLL, 1000])
@pytest.mark.parametrize("spoil", ["seq", "seq_end", "order", "none"])
def test_torn_records_are_refused_on_both_paths(count: int, spoil: str) -> None:
    data = _block(count, seed=3)
    victim = count // 2
    offset = victim * ring.RECORD_SIZE
    if spoil == "seq":
        data[offset : offset + 8] = (victim + 99).to_bytes(8, "little")
    elif spoil == "seq_end":
        data[offset + 120 : offset + 128] = (0).to_bytes(8, "little")
    elif spoil == "order":  # a record of the previous lap, both tags consistent but stale
        stale = (victim + 1 - 4096).to_bytes(8, "little", signed=True)
        data[offset : offset + 8] = data[offset + 120 : offset + 128] = stale
    kept, rejected = validated(data, 0, crc=False)
    assert rejected == (0 if spoil == "none" else 1)
    assert len(kept) == (count - rejected) * ring.RECORD_SIZE


def test_a_run_starting_later_is_checked_against_its_own_first_index() -> None:
    data = _block(BIG_POLL, seed=4)
    assert validated(data, 0, crc=False)[1] == 0
    assert validated(data, 1, crc=False)[1] == BIG_POLL  # every tag is one short of index + 1
