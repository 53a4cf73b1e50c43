"""The writer's hot path: ``record()`` and ``set_live()`` as closures over one mapped segment.

They are closures rather than methods because every attribute lookup shows in a sub-microsecond
budget: the mapping and the packer are bound names, the arguments go straight into one
precompiled ``Struct.pack_into`` (the x86 ``record`` is compiled per phase count so that no
``*args`` tuple is built), and publication is one aligned 8-byte store of ``head`` (never a
``pack_into``, which memsets before it packs: readers would see zeros).

Without crc the writer also keeps running totals of what it published (format 1.1): a few
integer additions per record and, every ``TOTALS_EVERY``-th record, one pack of them into a
totals slot before the head moves.  With them a monitor reads a fast trainer's newest records
only, however many steps a second it takes (``collectors/ring_totals.py``).

Nothing here raises into training code.  Values the fast pack refuses take a slow path that
clamps what is numeric (setting FLAG_CLAMPED) and drops the rest.  Once the segment is released
(close, fork) the mapping is closed, so a stale reference to ``record`` can only fail into the
slow path and count a drop; it never writes anywhere.
"""

from __future__ import annotations

import math
import mmap
import operator
import struct
from collections.abc import Callable, Sequence
from typing import NamedTuple

from traintop.ring_format import (
    DROPPED_WORD,
    FLAG_CLAMPED,
    FLAG_GPU_VALID,
    FLAG_MEM_VALID,
    HEAD_WORD,
    HEADER_SIZE,
    HEARTBEAT_WORD,
    LIVE_STEP_WORD,
    LIVE_WORD,
    MAX_PHASES,
    RECORD,
    RECORD_CRC_OFFSET,
    RECORD_SIZE,
    TOTALS,
    TOTALS_EVERY,
    TOTALS_OFFSET,
    TOTALS_SLOTS,
    record_crc,
)

_U16, _U32, _U64 = (0, 0xFFFF), (0, 0xFFFFFFFF), (0, (1 << 64) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)
_RECORD_RANGES = (_I64, _U64, *([_U64] * MAX_PHASES), _U32, _U16, _U16, _U64, _U64, _U32)
_FLAGS_INDEX = 11  # position of flags in the record values after seq
_CRC = struct.Struct("<I")

RecordFn = Callable[..., None]


class Recorder(NamedTuple):
    """The closures bound to one segment; ``dropped()`` counts records refused outright."""

    record: RecordFn
    set_live: Callable[[int, int], None]
    dropped: Callable[[], int]


def make_recorder(
    mm: mmap.mmap, q: memoryview, signed: memoryview, capacity: int, n_phases: int, crc: bool
) -> Recorder:
    """Closures writing records into ``mm`` from index 0 (``q`` is its ``cast('Q')`` view,
    ``signed`` its ``cast('l')``: the x86 record's cheaper stores, ``traintop.ring.RingWriter``)."""
    pad = (0,) * (MAX_PHASES - n_phases)
    pack, mask = RECORD.pack_into, capacity - 1
    scratch = bytearray(RECORD_SIZE)
    cursor = [0]  # records written; shared with the generated x86 ``record``
    add_totals: Callable[..., None] | None = None  # the generated ``add``, for the slow path
    dropped = 0

    def record_crc_(step: int, t_start_ns: int, phase_ns: Sequence[int], samples: int,
                    gpu_ns: int = 0, gpu_lag: int = 0, mem_bytes: int = 0, flags: int = 0,
                    tokens: int = 0) -> None:  # fmt: skip
        """Weak-memory hot path: readers accept the record only if its crc matches."""
        try:
            values = (step, t_start_ns, *phase_ns, *pad, samples, flags, gpu_lag, gpu_ns,
                      mem_bytes, tokens)  # fmt: skip
            store(values)
        except Exception:
            slow(step, t_start_ns, phase_ns, samples, flags, gpu_lag, gpu_ns, mem_bytes, tokens)

    def store(values: tuple) -> None:
        """Write and publish one record from values that are known to fit."""
        n = cursor[0]
        seq, offset = n + 1, HEADER_SIZE + (n & mask) * RECORD_SIZE
        if crc:
            pack(scratch, 0, seq, *values, 0, seq)
            _CRC.pack_into(scratch, RECORD_CRC_OFFSET, record_crc(scratch))
            mm[offset : offset + RECORD_SIZE] = scratch
        else:
            pack(mm, offset, seq, *values, 0, seq)
        cursor[0] = seq
        if add_totals is not None:
            add_totals(
                seq, values[10], values[11], values[13], values[14], *values[2 : 2 + n_phases]
            )
        q[HEAD_WORD] = seq
        q[HEARTBEAT_WORD] = values[1]
        q[LIVE_STEP_WORD] = (values[0] + 1) & 0xFFFF_FFFF_FFFF_FFFF

    def slow(*raw_args: object) -> None:
        """Clamp what is numeric and store it; count a drop for anything else."""
        nonlocal dropped
        try:
            store(_fitted(raw_args, len(pad)))
        except Exception:
            dropped += 1
            try:
                q[DROPPED_WORD] = dropped
            except Exception:  # released (closed or forked): nothing to publish into
                return

    def set_live(phase_index: int, start_ns: int) -> None:
        """Publish "now in phase X since T" (one store) so a hang can be named."""
        try:
            q[LIVE_WORD] = start_ns & -16 | phase_index
        except Exception:
            return

    if crc:
        record: RecordFn = record_crc_
    else:
        scope = {"mm": mm, "q": q, "ql": signed, "cursor": cursor, "mask": mask, "slow": slow,
                 "pack_short": _short_record(n_phases).pack_into,
                 "pack_totals": _totals_struct(n_phases).pack_into}  # fmt: skip
        record, add_totals = _fast_record(n_phases, scope)
    return Recorder(record, set_live, lambda: dropped)


# The x86 hot path, compiled per phase count so the phases are unpacked into names: a
# ``*phase_ns`` call costs ~90 ns more than the whole pack.  One pack_into (unused phase slots
# are zeroed pad bytes), the totals, then head (the publication), heartbeat and the step in
# progress.  The totals are cells of ``make`` (a cell costs half a list item's update), shared
# with ``add``, which the slow path calls for a record it clamped.  The flags are tested as
# constants, and the pack comes every TOTALS_EVERY records.  The three words go through the
# signed view ``ql`` (a third cheaper a store, same bytes); a value it refuses (a step past
# 2**63 - 2, a released view) takes the unsigned view as before.
_FAST_RECORD = """
def make():
    sam = bat = gns = gst = mseq = mlast = {zeros}0

    def add(seq, samples, flags, gpu_ns, mem_bytes, {phases}):
        nonlocal sam, bat, gns, gst, mseq, mlast, {sums}
{totals}

    def record(step, t_start_ns, phase_ns, samples, gpu_ns=0, gpu_lag=0, mem_bytes=0, flags=0,
               tokens=0):
        nonlocal sam, bat, gns, gst, mseq, mlast, {sums}
        n = cursor[0]
        seq = n + 1
        try:
            {phases}, = phase_ns
            pack_short(mm, HEADER_SIZE + (n & mask) * RECORD_SIZE, seq, step, t_start_ns,
                       {phases}, samples, flags, gpu_lag, gpu_ns, mem_bytes, tokens, 0, seq)
        except Exception:
            slow(step, t_start_ns, phase_ns, samples, flags, gpu_lag, gpu_ns, mem_bytes, tokens)
            return
        cursor[0] = seq
{totals}
        try:
            ql[HEAD_WORD] = seq
            ql[HEARTBEAT_WORD] = t_start_ns
            ql[LIVE_STEP_WORD] = step + 1  # a negative step: its two's complement, as u64
        except ValueError:
            q[HEAD_WORD] = seq
            q[HEARTBEAT_WORD] = t_start_ns
            q[LIVE_STEP_WORD] = (step + 1) & 0xFFFF_FFFF_FFFF_FFFF

    return record, add
"""
_TOTALS = """
        sam += samples
        if samples:
            bat += 1
        if flags & {either}:
            if flags & {gpu}:
                gns += gpu_ns
                gst += 1
            if flags & {mem}:
                mseq = seq
                mlast = mem_bytes
{adds}
        if not seq & {every_mask}:  # offset: ring_format.totals_offset(seq), inlined
            try:
                pack_totals(mm, {offset} + (seq >> {shift} & {slot_mask}) * {size}, seq, sam, bat,
                            gns, gst, mseq, mlast, {sums}, seq)
            except Exception:  # a sum past u64 (absurd values): the slot stays torn or old, so
                pass  # readers read every record from then on
"""


def _fast_record(n_phases: int, scope: dict) -> tuple[RecordFn, Callable[..., None]]:
    """``_FAST_RECORD`` for ``n_phases`` (its ``record`` and ``add``), free names from ``scope``."""
    names = ", ".join(f"p{i}" for i in range(n_phases))
    sums = ", ".join(f"s{i}" for i in range(n_phases))
    adds = "\n".join(f"        s{i} += p{i}" for i in range(n_phases))
    totals = _TOTALS.format(
        adds=adds, sums=sums, every_mask=TOTALS_EVERY - 1, gpu=FLAG_GPU_VALID, mem=FLAG_MEM_VALID,
        either=FLAG_GPU_VALID | FLAG_MEM_VALID, offset=TOTALS_OFFSET,
        shift=TOTALS_EVERY.bit_length() - 1, slot_mask=TOTALS_SLOTS - 1, size=TOTALS.size,
    )  # fmt: skip
    scope |= {"HEADER_SIZE": HEADER_SIZE, "RECORD_SIZE": RECORD_SIZE, "HEAD_WORD": HEAD_WORD,
              "HEARTBEAT_WORD": HEARTBEAT_WORD, "LIVE_STEP_WORD": LIVE_STEP_WORD}  # fmt: skip
    zeros = "".join(f"s{i} = " for i in range(n_phases))
    source = _FAST_RECORD.format(phases=names, sums=sums, totals=totals, zeros=zeros)
    exec(source, scope)  # a fixed source: only the count varies
    return scope["make"]()


def _totals_struct(n_phases: int) -> struct.Struct:
    """TOTALS with the unused phase sums as pad bytes, like ``_short_record``."""
    pad = f"{8 * (MAX_PHASES - n_phases)}x" if n_phases < MAX_PHASES else ""
    return struct.Struct(f"<{7 + n_phases}Q{pad}Q")


def _short_record(n_phases: int) -> struct.Struct:
    """RECORD with the unused phase slots as pad bytes, which pack_into writes as zeros."""
    fmt = RECORD.format
    start = fmt.index("8Q")
    pad = f"{8 * (MAX_PHASES - n_phases)}x" if n_phases < MAX_PHASES else ""
    return struct.Struct(f"{fmt[:start]}{n_phases}Q{pad}{fmt[start + 2 :]}")


def _fitted(raw_args: tuple, n_pad: int) -> tuple:
    """The record values after seq, each clamped into its field; FLAG_CLAMPED if any moved."""
    step, t_start_ns, phase_ns, samples, flags, gpu_lag, gpu_ns, mem_bytes, tokens = raw_args
    phases = tuple(phase_ns)  # type: ignore[arg-type]
    if len(phases) + n_pad != MAX_PHASES:
        raise ValueError("wrong number of phases")
    raw = (step, t_start_ns, *phases, *(0,) * n_pad, samples, flags, gpu_lag, gpu_ns,
           mem_bytes, tokens)  # fmt: skip
    fitted = [_clamp(v, bounds) for v, bounds in zip(raw, _RECORD_RANGES, strict=True)]
    values = [value for value, _ in fitted]
    if any(changed for _, changed in fitted):
        values[_FLAGS_INDEX] |= FLAG_CLAMPED
    return tuple(values)


def _clamp(value: object, bounds: tuple[int, int]) -> tuple[int, bool]:
    """Integer value within ``bounds`` and whether it had to be changed; raises on non-numbers."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("not a finite number")
        value = int(value)
    number = operator.index(value)  # type: ignore[arg-type]
    low, high = bounds
    fitted = min(max(number, low), high)
    return fitted, fitted != number
