"""Writer lifecycle, fork safety, fallbacks and every malformed segment the reader must refuse."""

from __future__ import annotations

import os
import pickle
import signal
import stat
import struct
import subprocess
import sys
import time

import pytest

from tests.ring_helpers import consistent, make_segment, write
from traintop import ring_format as fmt
from traintop.collectors.ring_reader import (
    SegmentError,
    discover,
    open_segment,
    remove_stale,
    segment_paths,
)
from traintop.ring import FLAG_CLAMPED, RingWriter


def test_published_segment_is_private_and_round_trips(tmp_path):
    w = make_segment(tmp_path / "ring", rank=2, world_size=4)
    assert stat.S_IMODE(os.stat(w.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "ring").st_mode) == 0o700
    for i in range(100):
        write(w, i)
    seg = open_segment(w.path)
    assert (seg.header.rank, seg.header.world_size, seg.header.pid) == (2, 4, os.getpid())
    records = list(seg.last(50))
    assert [r.seq for r in records] == list(range(51, 101))
    assert all(consistent(r) for r in records)
    assert discover(str(tmp_path / "ring")) == [w.path]


def test_bad_values_never_raise_and_are_clamped_or_dropped(tmp_path):
    w = make_segment(tmp_path / "ring")
    w.record(1, -5, (1.7, 2, 3), 2**40)  # clamped
    w.record(None, 1, (1, 2, 3), 1)  # dropped
    w.record(1, 1, (1, 2), 1)  # wrong phase count: dropped
    w.record(2, 10, (1, 2, 3), 4)
    assert w.dropped == 2
    recs = list(open_segment(w.path).last(10))
    assert [r.step for r in recs] == [1, 2]
    assert recs[0].flags & FLAG_CLAMPED and recs[0].samples == 2**32 - 1 and recs[0].t_start_ns == 0


def test_crc_mode_rejects_a_corrupted_record(tmp_path):
    w = make_segment(tmp_path / "ring", crc=True)
    for i in range(10):
        write(w, i)
    with open(w.path, "r+b") as f:  # flip one payload byte of record index 3
        f.seek(4096 + 3 * 128 + 40)
        f.write(b"\xff")
    result = open_segment(w.path).last(100)
    assert len(result) == 9  # 10 written, one rejected
    assert 4 not in [r.seq for r in result]


def test_close_marks_finished_and_sigkill_reads_as_crashed(tmp_path):
    w = make_segment(tmp_path / "ring")
    seg = open_segment(w.path)
    assert seg.liveness() == "live"
    w.close()
    assert seg.liveness() == "finished" and w.path.exists()
    code = ("from tests.ring_helpers import *; import time, sys;"
            f"w = make_segment({str(tmp_path / 'ring')!r}); print(w.path, flush=True);"
            "[write(w, i) for i in range(500)]; time.sleep(60)")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    path = proc.stdout.readline().strip()
    time.sleep(0.2)
    crashed = open_segment(path)
    assert crashed.liveness() == "live"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert crashed.liveness() == "crashed"
    assert all(consistent(r) for r in crashed.last(499)) and len(crashed.last(499)) == 499


def test_stale_cleaner_removes_dead_keeps_live(tmp_path):
    live = make_segment(tmp_path / "ring")
    done = make_segment(tmp_path / "ring")
    done.close()
    assert remove_stale(str(tmp_path / "ring"), max_age_s=3600) == []
    assert remove_stale(str(tmp_path / "ring"), max_age_s=0) == [done.path]
    assert live.path.exists()


def test_forked_child_never_writes_into_parent_segment(tmp_path):
    w = make_segment(tmp_path / "ring")
    write(w, 0)
    pid = os.fork()
    if pid == 0:
        for _ in range(1000):
            w.record(99, 99, (9, 9, 9), 9)
        os._exit(0 if not w.enabled else 1)
    assert os.waitpid(pid, 0)[1] == 0
    write(w, 1)
    assert [r.seq for r in open_segment(w.path).last(10)] == [1, 2]
    assert open_segment(w.path).liveness() == "live"


def test_writer_is_not_picklable(tmp_path):
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(make_segment(tmp_path / "ring"))


def test_fallback_dir_and_disabled_writer(tmp_path, capsys):
    bad = tmp_path / "lax"
    bad.mkdir(mode=0o777)
    os.chmod(bad, 0o777)
    good = tmp_path / "good"
    w = RingWriter.create(name="j", phases=("data",), directory=f"{bad}{os.pathsep}{good}")
    assert w.enabled and w.path.parent == good
    assert "fallback" in capsys.readouterr().err
    off = RingWriter.create(name="j", phases=("data",), directory=str(bad))
    off.record(1, 1, (1,), 1)
    err = capsys.readouterr().err.strip().splitlines()
    assert not off.enabled and len(err) == 1 and "disabled" in err[0]


def test_full_tmpfs_falls_back(tmp_path, capsys):
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(tiny)],
                      capture_output=True).returncode:  # fmt: skip
        pytest.skip("cannot mount a tmpfs here")
    try:
        os.chmod(tiny, 0o700)
        w = RingWriter.create(
            name="j", phases=("data",), directory=f"{tiny}{os.pathsep}{tmp_path / 'b'}"
        )
        write_ok = w.enabled and w.path.parent == tmp_path / "b"
        w.close()
    finally:
        subprocess.run(["umount", str(tiny)], check=False)
    assert write_ok and "fallback" in capsys.readouterr().err


def _corrupt(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _fix_crc(path):
    with open(path, "r+b") as f:
        page = bytearray(f.read(1024))
        struct.pack_into("<I", page, fmt.HEADER_CRC_OFFSET, fmt.header_crc(page))
        f.seek(0)
        f.write(page)


CASES = {
    "bad magic": (0, b"XXRING\0\1", False, "bad magic"),
    "not initialised": (0, b"\0" * 8, False, "not initialised"),
    "version": (8, struct.pack("<H", 2), True, "version 2"),
    "endian": (44, struct.pack(">I", fmt.ENDIAN_TAG), True, "byte order"),
    "record size": (16, struct.pack("<I", 64), True, "record size"),
    "capacity": (20, struct.pack("<I", 100), True, "capacity 100"),
    "crc": (300, b"\x01", False, "checksum"),
    "other uid": (80, struct.pack("<I", 12345), True, "uid 12345"),
    "phases": (116, struct.pack("<I", 200), True, "200 phases"),
    "utf8": (256, b"\xff\xfe", True, "UTF-8"),
}


@pytest.mark.parametrize("case", CASES)
def test_malformed_header_is_refused_with_one_line(tmp_path, case):
    w = make_segment(tmp_path / "ring")
    offset, data, fix, message = CASES[case]
    _corrupt(w.path, offset, data)
    if fix:
        _fix_crc(w.path)
    with pytest.raises(SegmentError, match=message) as err:
        open_segment(w.path)
    assert "\n" not in str(err.value)


def test_truncated_symlink_fifo_and_lax_mode_are_refused(tmp_path):
    w = make_segment(tmp_path / "ring")
    link, fifo = tmp_path / "ring" / "1-r0-00000000.ring", tmp_path / "ring" / "2-r0-00000000.ring"
    link.symlink_to(w.path)
    os.mkfifo(fifo, 0o600)
    for path, message in [(link, "cannot open"), (fifo, "not a regular file")]:
        with pytest.raises(SegmentError, match=message):
            open_segment(path)
    for i in range(100):
        write(w, i)
    seg = open_segment(w.path)
    os.truncate(w.path, 8192)
    with pytest.raises(SegmentError, match=r"size|truncated"):
        open_segment(w.path)
    with pytest.raises(SegmentError, match="truncated"):
        seg.last(100)
    os.chmod(w.path, 0o644)
    with pytest.raises(SegmentError, match="open to others"):
        open_segment(w.path)


def test_records_the_writer_may_have_overwritten_during_the_copy_are_lost_never_torn(tmp_path):
    """The head read after the copy says how far the writer got meanwhile: the slots it may
    have reused are dropped from the copy and counted lost, the rest come back intact."""
    w = make_segment(tmp_path / "ring", capacity=16)
    for i in range(10):
        write(w, i)
    seg = open_segment(w.path)
    copy = seg._copy

    def copy_then_lap(lo, hi):
        buf = copy(lo, hi)
        for i in range(10, 20):  # the writer goes on while the reader holds its copy
            write(w, i)
        return buf

    seg._copy = copy_then_lap
    result = seg.poll()
    assert [r.seq for r in result.records] == [6, 7, 8, 9, 10]  # indices below 20 - 15 dropped
    assert all(consistent(r) for r in result.records)
    assert (result.lost, result.rejected, seg.next_index) == (5, 0, 10)
    assert seg.last_hot.head == 20


def test_a_poll_with_nothing_new_is_one_read_of_the_hot_block(tmp_path, monkeypatch):
    w = make_segment(tmp_path / "ring")
    write(w, 0)
    seg = open_segment(w.path)
    seg.poll()
    w.set_live(1, 10**12)
    reads, pread, preadv = [], os.pread, os.preadv
    monkeypatch.setattr(os, "pread", lambda *a: reads.append("pread") or pread(*a))
    monkeypatch.setattr(os, "preadv", lambda *a: reads.append("preadv") or preadv(*a))
    result = seg.poll()
    assert len(result.records) == 0 and (result.lost, result.rejected) == (0, 0)
    assert reads == ["pread"]
    assert (seg.last_hot.live_phase, seg.last_hot.live_start_ns) == (1, 10**12)


def test_polled_blocks_hand_on_the_read_buffer_and_record_it_as_bytes(tmp_path):
    w = make_segment(tmp_path / "ring")
    for i in range(5):
        write(w, i)
    block = open_segment(w.path).poll().records
    raw = block.raw()
    assert type(raw) is bytes and len(raw) == 5 * fmt.RECORD_SIZE
    assert block.raw() is raw and [r.seq for r in block] == [1, 2, 3, 4, 5]


def test_segment_paths_lists_what_discover_does_as_strings(tmp_path):
    w = make_segment(tmp_path / "ring")
    ring = tmp_path / "ring"
    (ring / "2-r0-0000beef.ring").symlink_to(w.path)
    (ring / "3-r0-0000cafe.ring").mkdir()
    (ring / ".tmp-4-r0-0000f00d.ring").write_bytes(b"")
    (ring / "notes.txt").write_bytes(b"")
    assert segment_paths(str(ring)) == [str(w.path)]
    assert discover(str(ring)) == [w.path]
