"""A ring segment header for recorder tests that feed records without a real ring."""

from __future__ import annotations

from pathlib import Path

from traintop import ring_format as ring
from traintop.collectors.ring_header import SegmentHeader

PHASES = ("data", "forward", "backward", "optimizer", "other")


def header(rank: int = 0, name: str = "train") -> SegmentHeader:
    return SegmentHeader(
        path=Path(f"/dev/shm/test-r{rank}"), name=name, pid=4242 + rank, start_ticks=1,
        pidns_inode=1, boot_id=b"b" * 16, uid=1000, rank=rank, local_rank=rank, world_size=1,
        phases=PHASES, data_phase_index=0, mem_kind=ring.MEM_NONE, capacity=4096, crc=False,
        instance_id=rank, created_monotonic_ns=10**12, created_realtime_ns=1_750_000_000 * 10**9,
        run_id="", hostname="node",
    )  # fmt: skip
