"""The recording format: lossless round trips, key frames, versions, and one-line refusals."""

from __future__ import annotations

import dataclasses
import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.job_fixtures import data_bound_job
from tests.snapshot_fixtures import GIB, MIB, series
from tests.store_helpers import record, verdict
from traintop import ring_format as ring
from traintop.collectors.snapshot import JobSnapshot, ProcessSnapshot, Snapshot
from traintop.store import frames, schema, steps
from traintop.store.codec import Decoder, current_schema, encode
from traintop.store.reader import Recording
from traintop.store.schema import StoreError
from traintop.store.trim import trim
from traintop.store.writer import Recorder


def test_a_snapshot_survives_encoding_with_every_field():
    snap = series(1, gpus=8, jobs=(data_bound_job(),))[0]
    back = Decoder(current_schema()).decode(Snapshot, encode(snap))
    assert encode(back) == encode(snap)
    assert back.jobs[0].phases == snap.jobs[0].phases
    assert back.timestamp == snap.timestamp  # exact: points in time are never rounded


def test_every_float_is_kept_exactly():
    """850.0499999 MB/s draws "850.0"; kept to 6 digits it became 850.05, drawn "850.1" in
    replay (CI caught it).  Collectors round where they measure; the file rounds nothing."""
    snap = series(1)[0]
    gpu = dataclasses.replace(snap.gpus[0], pcie_tx_bytes_per_s=850_049_999.9, power_w=0.1 + 0.2)
    back = Decoder(current_schema()).decode(
        Snapshot, json.loads(json.dumps(encode(dataclasses.replace(snap, gpus=(gpu,)))))
    )
    assert back.gpus[0].pcie_tx_bytes_per_s == 850_049_999.9
    assert back.gpus[0].power_w == 0.1 + 0.2


def test_a_recording_keeps_job_gpu_and_busiest_processes_without_wait_totals():
    """400 rows: the trainer (a GPU holder), its worker, and the top by CPU and by memory are
    kept; a wait total is dropped while its rate stays."""
    wait = {"cpu_wait_pct": 1.5, "cpu_wait_s": 0.123456789}
    rows = [ProcessSnapshot(pid, 1, "root", f"d{pid}", "d", pid / 100, pid * MIB, 0.0, 0.0, **wait)
            for pid in range(1, 401)]  # fmt: skip
    rows[0] = dataclasses.replace(rows[0], gpu_mem_bytes=GIB)
    rows[1] = dataclasses.replace(rows[1], group_pid=1)
    kept = trim(dataclasses.replace(series(1)[0], processes=tuple(rows))).processes
    assert [p.pid for p in kept] == [1, 2, *range(371, 401)]  # top 30 by CPU hold the top 15 by RSS
    assert {p.cpu_wait_s for p in kept} == {None} and {p.cpu_wait_pct for p in kept} == {1.5}


def test_a_recording_leaves_out_the_recent_steps_and_their_split_by_phase():
    """Both are in the recording's step records, losslessly."""
    job = dataclasses.replace(
        data_bound_job(), recent_step_times_s=(0.3, 0.4), recent_phase_times_s=((0.1, 0.2),) * 2
    )
    (kept,) = trim(series(1, jobs=(job,))[0]).jobs
    assert kept.recent_step_times_s == () and kept.recent_phase_times_s == ()


def test_an_older_file_without_a_new_field_reads_it_as_its_default():
    """Fields are added at the end with defaults; a file written before one existed still
    decodes, the new field taking its default, and a field since removed is skipped."""
    snap = series(1, jobs=(data_bound_job(),))[0]
    written = current_schema()
    written["JobSnapshot"] = [*written["JobSnapshot"][:-2], "a_field_removed_since"]
    row = encode(snap)
    job_row = [*row[11][0][:-2], "gone"]
    row[11] = [job_row]
    back = Decoder(written).decode(Snapshot, row)
    defaults = {f.name: f.default for f in dataclasses.fields(JobSnapshot)}
    assert back.jobs[0].job_id == defaults["job_id"]
    assert back.jobs[0].started_at is None
    assert back.jobs[0].name == snap.jobs[0].name


def test_every_sample_reads_back_in_any_order(tmp_path):
    snaps = series(frames.KEY_EVERY * 2 + 5, gpus=8)
    verdicts = [verdict("compute" if i < 70 else "data_cpu") for i in range(len(snaps))]
    path = record(tmp_path / "r.ttrec", snaps, verdicts)
    order = list(range(len(snaps)))
    random.Random(1).shuffle(order)
    with Recording(path) as rec:
        for i in order:
            snapshot, v = rec.sample(i)
            assert encode(snapshot) == encode(snaps[i])
            assert v.primary.bottleneck == verdicts[i].primary.bottleneck
        assert [b for _, b in rec.verdict_timeline()][69:71] == ["compute", "data_cpu"]


def test_a_finished_recording_is_one_file(tmp_path):
    """WAL while recording, rollback journal once closed: the file can be mailed or read from
    a read-only place without its -wal and -shm companions."""
    path = record(tmp_path / "r.ttrec", series(3), [None] * 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.ttrec"]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert conn.execute("PRAGMA application_id").fetchone()[0] == schema.APPLICATION_ID


def test_step_records_round_trip_through_shuffle_and_deflate():
    records = b"".join(
        ring.RECORD.pack(
            i + 1, i, 10**12 + i * 10**8, *([i * 1000 + 7] * 8), 16, 0, 0, 0, 0, 0, 0, i + 1
        )
        for i in range(50)
    )
    blob, shuffled = steps.pack(records)
    block, again = steps.unpack(blob, 50, 5)
    assert block.raw() == records and again == shuffled
    later = records[128 * 10 :] + records[: 128 * 10]  # a second block, against the first
    blob2, _ = steps.pack(later, shuffled)
    assert steps.unpack(blob2, 50, 5, shuffled)[0].raw() == later
    assert block.steps() == list(range(50))
    with pytest.raises(ValueError):
        steps.pack(records[:-1])


def test_an_existing_file_is_never_overwritten(tmp_path):
    path = tmp_path / "r.ttrec"
    path.write_text("precious")
    with pytest.raises(StoreError, match="already exists"):
        Recorder(path)
    assert path.read_text() == "precious"


def test_an_unwritable_place_is_one_line(tmp_path):
    with pytest.raises(StoreError) as err:
        Recorder(tmp_path / "no" / "such" / "dir" / "r.ttrec")
    assert "\n" not in str(err.value) and "no such directory" in str(err.value)


def _newer(tmp_path: Path) -> Path:
    path = record(tmp_path / "new.ttrec", series(2), [None] * 2)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {schema.FORMAT_VERSION + 1}")
    conn.commit()
    conn.close()
    return path


def _foreign_sqlite(tmp_path: Path) -> Path:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    return path


def _truncated(tmp_path: Path) -> Path:
    good = record(tmp_path / "good.ttrec", series(150, gpus=8), [verdict("compute")] * 150)
    path = tmp_path / "cut.ttrec"
    path.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    return path


BAD_FILES = {
    "missing": (lambda tmp: tmp / "nope.ttrec", "No such file"),
    "empty": (lambda tmp: (tmp / "e.ttrec", (tmp / "e.ttrec").write_bytes(b""))[0], "empty"),
    "text": (
        lambda tmp: (tmp / "t.ttrec", (tmp / "t.ttrec").write_text("hello\n" * 99))[0],
        "not a traintop recording",
    ),
    "foreign sqlite": (_foreign_sqlite, "not a traintop recording"),
    "newer version": (_newer, "newer traintop"),
    "truncated": (_truncated, "damaged or truncated"),
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_bad_files_are_refused_in_one_line(tmp_path, kind):
    make, expected = BAD_FILES[kind]
    with pytest.raises(StoreError) as err, Recording(make(tmp_path)) as rec:
        for i in range(len(rec.samples)):
            rec.sample(i)
    assert expected in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
@pytest.mark.parametrize("command", [["replay"], ["export", "--csv", "out"], ["compare"]])
def test_commands_on_bad_files_print_one_line_and_fail(tmp_path, kind, command):
    path = str(BAD_FILES[kind][0](tmp_path))
    argv = [command[0], path, *command[1:]]
    if command == ["compare"]:
        argv.append(path)
    out = subprocess.run([sys.executable, "-m", "traintop.cli.main", *argv], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traintop: "), out.stderr
    assert "Traceback" not in out.stderr


FULL_DISK = """
import dataclasses, os, resource, signal, sys
from tests.snapshot_fixtures import GIB, MIB, series
from traintop.store.writer import Recorder
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))
recorder = Recorder(sys.argv[1])
for snap in series(1000):
    noise = dataclasses.replace(snap.host, hostname=os.urandom(1500).hex())  # incompressible
    recorder.add_sample(dataclasses.replace(snap, host=noise), None)
recorder.stop()
print(recorder.error)
"""


def test_a_full_disk_ends_the_recording_with_one_line(tmp_path):
    """A file-size limit makes writes fail with EFBIG exactly as a full disk fails them."""
    out = subprocess.run([sys.executable, "-c", FULL_DISK, str(tmp_path / "r.ttrec")],
                         capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "stopped" in out.stdout and "full" in out.stdout, out.stdout
    assert len(out.stdout.strip().splitlines()) == 1


def test_schema_lists_every_snapshot_and_verdict_class():
    names = current_schema()
    assert {"Snapshot", "GpuSnapshot", "JobSnapshot", "PhaseShare", "Verdict", "Evidence"} <= set(
        names
    )
    assert json.loads(json.dumps(names)) == names


def test_step_chains_read_back_from_any_time(tmp_path):
    """Blocks are deflated against the rank's previous block; a reader that starts mid-way
    begins at the chain's key block, and every record comes back exactly."""
    from tests.store_test_headers import header
    from traintop.collectors.ring_reader import PollResult
    from traintop.collectors.ring_records import RecordBlock

    recorder = Recorder(tmp_path / "s.ttrec")
    raws, t_ns = [], 10**12
    for second in range(150):
        recs = []
        for i in range(10):
            seq = second * 10 + i
            recs.append(ring.RECORD.pack(seq + 1, seq, t_ns, *([10_000_000 + seq] * 5), 0, 0, 0,
                                         16, 0, 0, 0, 0, 0, 0, seq + 1))  # fmt: skip
            t_ns += 5 * (10_000_000 + seq)
        raws.append(b"".join(recs))
        recorder.add_records(header(), PollResult(RecordBlock(raws[-1], 5), 0, 0))
    recorder.add_sample(series(1)[0], None)
    recorder.stop()
    with Recording(tmp_path / "s.ttrec") as rec:
        (seg,) = rec.segments()
        assert b"".join(b.raw() for b in rec.steps(seg)) == b"".join(raws)
        start = (10**12 + seg.clock_offset_ns) / 1e9
        middle = list(rec.steps(seg, start + 100 * 0.5 - 0.1, start + 101 * 0.5 + 0.1))
        assert [b.steps()[0] for b in middle] == [990, 1000, 1010]
