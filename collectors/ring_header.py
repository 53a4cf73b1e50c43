"""Parsing and validation of a ring segment's static header (format v1, docs/ring-format.md).

A segment is a file anyone with our uid could have written, so every field that later drives an
offset, a size or a loop is checked here, and each failure becomes one readable line.
"""

from __future__ import annotations

import functools
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from traintop import ring_format
from traintop import ring_format as ring

_MIN_SIZE = ring.segment_size(ring.MIN_CAPACITY)
_MAX_SIZE = ring.segment_size(ring.MAX_CAPACITY)


class SegmentError(Exception):
    """A segment that cannot be used: foreign, corrupt, truncated or not yet initialised."""


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """Who wrote the segment and how to read it."""

    path: Path
    name: str
    pid: int
    start_ticks: int
    pidns_inode: int
    boot_id: bytes
    uid: int
    rank: int
    local_rank: int
    world_size: int
    phases: tuple[str, ...]
    data_phase_index: int | None
    mem_kind: int
    capacity: int
    crc: bool
    instance_id: int
    created_monotonic_ns: int
    created_realtime_ns: int
    run_id: str
    hostname: str
    totals: bool = False  # the writer keeps running totals (format 1.1, collectors/ring_totals.py)
    ledger: bool = False  # the collective ledger and helper words are kept (format 1.2)
    ppid: int = 0  # the writer's parent pid (0: unknown: an older writer)

    def same_host_clock(self) -> bool:
        """CLOCK_MONOTONIC values are comparable only within one boot."""
        return self.boot_id == _this_boot()

    def idle_s(self, hot: object) -> float:
        """Seconds since the writer last showed a sign of life (infinite after a reboot)."""
        if not self.same_host_clock():
            return float("inf")
        last = max(getattr(hot, "heartbeat_ns", 0), self.created_monotonic_ns)
        return (time.monotonic_ns() - last) / 1e9

    def visible(self) -> bool:
        """Whether the writer's ``/proc`` entry is ours to read: same boot, same pid namespace."""
        return self.pidns_inode != 0 and self.pidns_inode == _our_pidns() and self.same_host_clock()

    def writer_gone(self) -> bool:
        """True when, in our pid namespace, the writer pid is dead or now another process."""
        if self.pidns_inode == 0 or self.pidns_inode != _our_pidns():
            return False
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        except (OSError, IndexError, ValueError):
            return True
        return self.start_ticks != 0 and ticks != self.start_ticks


@functools.cache
def _this_boot() -> bytes:
    """Read once, not per segment and tick: a reboot ends the monitor too."""
    return ring_format.boot_id()


@functools.cache
def _our_pidns() -> int:
    """Read once: a process never changes its own pid namespace."""
    return ring_format.stat_ino("/proc/self/ns/pid")


def parse_header(path: Path, page: bytes, file_size: int) -> SegmentHeader:
    """Validate the first KiB of a segment against the file's real size."""
    if len(page) < ring.CRC_AREA_END or file_size < _MIN_SIZE:
        raise SegmentError(f"{path}: file too small ({file_size} bytes) to be a segment")
    if file_size > _MAX_SIZE:
        raise SegmentError(f"{path}: file too large ({file_size} bytes) to be a segment")
    fields = ring.HEADER.unpack_from(page)
    _check_identity(path, page, fields)
    _check_geometry(path, fields, file_size)
    stored_crc = struct.unpack_from("<I", page, ring.HEADER_CRC_OFFSET)[0]
    if stored_crc != ring.header_crc(page):
        raise SegmentError(f"{path}: header checksum mismatch (corrupt header)")
    if fields[14] != os.getuid():
        raise SegmentError(f"{path}: written by uid {fields[14]}, not by us ({os.getuid()})")
    return _build(path, page, fields)


def _check_identity(path: Path, page: bytes, fields: tuple) -> None:
    magic, major, _minor = fields[0], fields[1], fields[2]
    if magic != ring.MAGIC:
        state = "not initialised yet" if magic == b"\0" * 8 else "bad magic"
        raise SegmentError(f"{path}: {state}, not a traintop ring segment")
    if fields[9] != ring.ENDIAN_TAG:
        raise SegmentError(f"{path}: written with another byte order")
    if major != ring.VERSION_MAJOR:
        raise SegmentError(f"{path}: format version {major}, this traintop reads only 1")


def _check_geometry(path: Path, fields: tuple, file_size: int) -> None:
    header_size, record_size, capacity, data_offset, size_field = fields[3:8]
    if header_size != ring.HEADER_SIZE or data_offset != ring.HEADER_SIZE:
        raise SegmentError(f"{path}: unexpected header size {header_size}/{data_offset}")
    if record_size != ring.RECORD_SIZE:
        raise SegmentError(f"{path}: record size {record_size}, expected {ring.RECORD_SIZE}")
    if not ring.MIN_CAPACITY <= capacity <= ring.MAX_CAPACITY or capacity & (capacity - 1):
        raise SegmentError(f"{path}: capacity {capacity} is not a power of two in range")
    if size_field != ring.segment_size(capacity) or size_field != file_size:
        raise SegmentError(f"{path}: size {file_size} does not match capacity {capacity}")
    n_phases, data_index = fields[21], fields[22]
    if not 1 <= n_phases <= ring.MAX_PHASES:
        raise SegmentError(f"{path}: {n_phases} phases (1..{ring.MAX_PHASES} allowed)")
    if data_index >= n_phases and data_index != ring.NO_DATA_PHASE:
        raise SegmentError(f"{path}: data phase index {data_index} out of range")


def _text(path: Path, page: bytes, offset: int, size: int) -> str:
    try:
        return page[offset : offset + size].split(b"\0", 1)[0].decode()
    except UnicodeDecodeError:
        raise SegmentError(f"{path}: text field at {offset} is not valid UTF-8") from None


def _build(path: Path, page: bytes, f: tuple) -> SegmentHeader:
    phases = tuple(
        _text(path, page, ring.PHASES_OFFSET + i * ring.PHASE_NAME_SIZE, ring.PHASE_NAME_SIZE)
        for i in range(f[21])
    )
    return SegmentHeader(
        path=path,
        name=_text(path, page, ring.NAME_OFFSET, ring.TEXT_SIZE),
        pid=f[11],
        start_ticks=f[12],
        pidns_inode=f[13],
        boot_id=f[24],
        uid=f[14],
        rank=f[18],
        local_rank=f[19],
        world_size=f[20],
        phases=phases,
        data_phase_index=None if f[22] == ring.NO_DATA_PHASE else f[22],
        mem_kind=f[23],
        capacity=f[5],
        crc=bool(f[8] & ring.FLAG_CRC),
        instance_id=f[10],
        created_monotonic_ns=f[16],
        created_realtime_ns=f[17],
        run_id=_text(path, page, ring.RUN_ID_OFFSET, ring.TEXT_SIZE),
        hostname=_text(path, page, ring.HOSTNAME_OFFSET, ring.TEXT_SIZE),
        totals=bool(f[8] & ring.FLAG_TOTALS) and not f[8] & ring.FLAG_CRC,
        ledger=bool(f[8] & ring.FLAG_LEDGER),
        ppid=struct.unpack_from("<q", page, ring.PARENT_PID_OFFSET)[0],
    )
