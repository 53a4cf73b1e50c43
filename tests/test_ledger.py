"""The collective ledger (traintop/ledger.py, format 1.2): what the probe writes for each
collective and what the monitor reads back (collectors/ring_ledger.py), torn entries refused,
sequence numbers per group whole across the segment's creation, the hooks that feed it.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from tests.isolation import private_dir
from tests.test_probe import make_probe
from traintop import ring_format as ring
from traintop.collectors.ring_header import parse_header
from traintop.collectors.ring_ledger import newest_per_group, read_entries, shape_text
from traintop.collectors.ring_reader import open_segment
from traintop.comm_hooks import CollectiveBooker, Compiling, _booked_collective, _dtypes
from traintop.ledger import NOT_WRITTEN, Ledger, group_info
from traintop.probe import Probe
from traintop.ring import RingWriter


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        self.now += 1000
        return self.now


def read(ledger: Ledger) -> list:
    """What a monitor reads of the ledger's page, as it would read a segment."""
    page = bytes(ledger._page)
    head = lambda: struct.unpack_from("<Q", page, ring.LEDGER_HEAD_WORD * 8)[0]  # noqa: E731
    return read_entries(lambda size, off: page[off : off + size], head)


def ledger_with_groups(clock=None) -> Ledger:
    """A ledger that knows the default group (None) and a subgroup ("sub") and torch's
    dtypes, as comm_hooks.install leaves it."""
    ledger = Ledger(clock or Clock())
    known = {None: ("0:default_pg", 4, 1_800_000), "sub": ("1", 2, 600_000)}
    ledger.describe = lambda g: ledger.groups.setdefault(g, group_info(*known[g]))
    ledger.dtypes = _dtypes(torch)
    return ledger


def call(ledger: Ledger, tensor=None, op: int = 1, group=None) -> int:
    """``ledger.collective`` as a call from this module's ``step`` function."""

    def step() -> int:
        return ledger.collective(group, op, tensor, sys._getframe())

    return step()


def test_each_collective_is_entered_and_exited_with_its_group_sequence() -> None:
    ledger = ledger_with_groups()
    ledger.exit(call(ledger, torch.zeros(1024)))
    ledger.exit(call(ledger, None, op=12, group="sub"), raised=True)
    call(ledger, torch.zeros(8, 4, dtype=torch.bfloat16))
    entries = read(ledger)
    assert [(e.group, e.seq, e.op, e.shape) for e in entries] == [
        ("0:default_pg", 1, "all_reduce", "f32[1024]"),
        ("1", 1, "barrier", ""),
        ("0:default_pg", 2, "all_reduce", "bf16[8,4]"),
    ]
    assert entries[0].site.startswith("test_ledger.py:step:") and entries[2].exit_ns == 0
    assert entries[1].exit_ns & ring.LEDGER_RAISED and not entries[0].exit_ns & ring.LEDGER_RAISED
    assert entries[0].timeout_ms == 1_800_000 and entries[0].group_size == 4
    now = entries[2].enter_ns + 5_000_000_000
    newest = newest_per_group(entries, now)
    assert [(x.group, x.seq, x.inside, x.raised) for x in newest] == [
        ("1", 1, False, True),
        ("0:default_pg", 2, True, False),
    ]
    assert newest[1].age_s == 5.0 and newest[1].timeout_s == 1800.0
    assert ledger.written == 3


def test_the_ring_keeps_the_newest_entries_and_refuses_torn_ones() -> None:
    ledger = ledger_with_groups()
    for _ in range(ring.LEDGER_ENTRIES + 5):
        ledger.exit(call(ledger, torch.zeros(4)))
    entries = read(ledger)
    assert [e.seq for e in entries] == list(range(6, ring.LEDGER_ENTRIES + 6))
    offset = ring.ledger_offset(entries[-1].index)
    ledger._page[offset + ring.LEDGER_ENTRY.size - 8] = 0  # a slot caught mid-write
    assert [e.seq for e in read(ledger)][-1] == ring.LEDGER_ENTRIES + 4


def test_shapes_are_short_and_say_when_dims_are_left_out() -> None:
    ledger = ledger_with_groups()
    for tensor in (torch.tensor(1.0), torch.zeros(2, 3, 4, 5, 6, 7), None, "objects"):
        call(ledger, tensor)
    assert [e.shape for e in read(ledger)] == ["f32[]", "f32[2,3,4,5,…]", "", ""]
    assert shape_text(0, ring.NO_TENSOR, (0, 0, 0, 0)) == ""


def test_values_out_of_range_are_clamped_not_raised() -> None:
    class Huge:
        shape, dtype = (1 << 40, 3), torch.float16

    ledger = ledger_with_groups()
    call(ledger, Huge())
    (entry,) = read(ledger)
    assert entry.shape == "f16[4294967295,3]"
    ledger.describe = None  # no hooks installed: nothing is recorded
    assert call(ledger, torch.zeros(1)) == NOT_WRITTEN


def test_a_segment_created_later_takes_the_entries_and_the_sequence_goes_on(
    tmp_path: Path,
) -> None:
    """Collectives before the first step (DDP's broadcast, an init barrier) are kept."""
    ring_dir = private_dir(tmp_path / "ring")
    probe = Probe("job", writer_factory=lambda phases: RingWriter.create(
        name="job", phases=phases, directory=str(ring_dir)))  # fmt: skip
    probe._ledger = ledger = ledger_with_groups(time.monotonic_ns)
    ledger.exit(call(ledger, None, op=12))
    probe.step()  # the segment is made here
    call(ledger, torch.zeros(16))
    (path,) = ring_dir.glob("*.ring")
    with open_segment(path) as segment:
        assert segment.header.ledger
        assert [(e.op, e.seq, e.exit_ns == 0) for e in segment.ledger()] == [
            ("barrier", 1, False),
            ("all_reduce", 2, True),
        ]
        assert segment.hot().ledger_head == 2
    probe.close()
    call(ledger, torch.zeros(16))  # closed: a private page, no error


def test_a_1_1_segment_reads_with_no_ledger(tmp_path: Path) -> None:
    """Readers of this version still open a segment of the last one (flag clear)."""
    writer = RingWriter.create(
        name="old", phases=("data",), directory=str(private_dir(tmp_path / "r"))
    )
    page = bytearray(writer._mm[: ring.CRC_AREA_END])
    flags = struct.unpack_from("<I", page, 40)[0] & ~ring.FLAG_LEDGER
    struct.pack_into("<H", page, 10, 1)  # minor version 1
    struct.pack_into("<I", page, 40, flags)
    struct.pack_into("<I", page, ring.HEADER_CRC_OFFSET, ring.header_crc(page))
    header = parse_header(writer.path, bytes(page), writer._mm.size())
    assert not header.ledger
    writer.close()


def booker_for(probe):
    """A booker on ``probe`` whose ledger knows the default group and torch's dtypes."""
    probe._ledger = ledger_with_groups()
    return CollectiveBooker(probe, Compiling(lambda: False))


def test_a_booked_collective_writes_op_shape_dtype_and_its_caller() -> None:
    probe, _writers, _clock = make_probe()
    booker = booker_for(probe)

    def all_reduce(tensor, op=None, group=None, async_op=False):
        if tensor.shape[0] == 3:
            raise RuntimeError("Connection closed by peer")
        return "work" if async_op else None

    wrapped = _booked_collective(booker, all_reduce)
    wrapped(torch.zeros(5, 2, dtype=torch.bfloat16))
    wrapped(torch.zeros(7), async_op=True)  # its wait is work.wait(): not a blocking call
    with pytest.raises(RuntimeError):
        wrapped(torch.zeros(3))
    entries = read(probe._ledger)
    assert [(e.op, e.seq, e.shape) for e in entries] == [
        ("all_reduce", 1, "bf16[5,2]"),
        ("all_reduce", 2, "f32[3]"),
    ]
    assert entries[0].site.startswith("test_ledger.py:test_a_booked")  # 32 bytes at most
    assert entries[1].exit_ns & ring.LEDGER_RAISED


def test_other_threads_and_a_disabled_probe_write_nothing() -> None:
    probe, _writers, _clock = make_probe()
    wrapped = _booked_collective(booker_for(probe), lambda tensor, group=None, async_op=False: None)
    worker = threading.Thread(target=wrapped, args=(torch.zeros(2),))
    worker.start()
    worker.join()
    probe._on = False
    wrapped(torch.zeros(2))
    assert read(probe._ledger) == []


EXPLICIT = """
import sys, tempfile, torch, torch.distributed as dist, traintop
probe = traintop.attach(name="explicit")  # no `traintop run`: the explicit API alone
dist.init_process_group("gloo", init_method=f"file://{tempfile.mktemp()}", rank=0, world_size=1)
dist.barrier()
probe.step()
dist.all_reduce(torch.ones(3, dtype=torch.float64))
print(probe._writer.path, flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_an_explicit_probe_keeps_the_ledger_and_its_helper(tmp_path: Path) -> None:
    """``traintop.attach()`` after ``import torch``, with no shim: collectives are recorded
    (the segment is kept, shrunk, after the clean exit: the ledger is in its header page)."""
    ring_dir = private_dir(tmp_path / "ring")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "TRAINTOP_RING_DIR": str(ring_dir)}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", EXPLICIT], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    path = Path(done.stdout.strip().splitlines()[-1])
    with open_segment(path) as segment:
        entries = [(e.op, e.seq, e.shape) for e in segment.ledger()]
    assert entries == [("barrier", 1, ""), ("all_reduce", 2, "f64[3]")]
    assert "traintop:" not in done.stderr
