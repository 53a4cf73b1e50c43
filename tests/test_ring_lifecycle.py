"""How a writer's end reads to the monitor, with real processes killed by real signals.

Decisions under test (docs/ring-format.md, "Liveness and lifetime"):
* Ctrl-C (SIGINT -> KeyboardInterrupt) unwinds the script, atexit closes the segment: the
  segment is "finished", and its ``.end`` says SIGINT: the job reads "stopped".
* SIGTERM with its default action runs no Python cleanup: the lock is released but the state
  word still says RUNNING.  faulthandler, registered on it (C, chained to the default action),
  wrote the dump first: the job reads "stopped" by SIGTERM.  A SIGKILL leaves nothing: "gone".
  A script that handles SIGTERM itself and exits normally is "finished".
* Whatever the moment of death, no torn record is ever returned and earlier records are intact.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ring_helpers import consistent, make_segment, write
from traintop import ring_format as fmt
from traintop.collectors.jobs import JobCollector
from traintop.collectors.ring_reader import open_segment

REPO = Path(__file__).resolve().parents[1]
WRITER = Path(__file__).parent / "workloads" / "ring_writer.py"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_writer(ring: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, "TRAINTOP_RING_DIR": str(ring), "PYTHONPATH": str(REPO)}
    # SIGINT as a terminal delivers it: a suite started in the background (`cmd &` in a script)
    # hands its children SIGINT ignored, and Python then never raises KeyboardInterrupt
    proc = subprocess.Popen([sys.executable, str(WRITER), *args], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)  # fmt: skip
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        pytest.fail(f"writer did not start: {proc.communicate()[1]}")
    return proc, Path(line)


def stop(proc: subprocess.Popen, signum: int) -> int:
    proc.send_signal(signum)
    proc.communicate(timeout=30)
    return proc.returncode


def assert_consecutive(records: list, head: int) -> None:
    seqs = [r.seq for r in records]
    assert seqs == list(range(head - len(seqs) + 1, head + 1))


@pytest.mark.parametrize(("signum", "state"), [(signal.SIGINT, "finished"),
                                               (signal.SIGTERM, "crashed")])  # fmt: skip
def test_a_signal_stops_the_job_and_says_which(tmp_path, signum, state):
    proc, path = start_writer(tmp_path / "ring", "probe", "sig-job")
    time.sleep(0.3)
    assert open_segment(path).liveness() == "live"
    assert stop(proc, signum) == -signum  # KeyboardInterrupt re-raises SIGINT on exit
    segment = open_segment(path)
    assert segment.liveness() == state  # the segment alone: closed at exit, or not
    (job,) = JobCollector(str(tmp_path / "ring")).collect()
    assert job.state == "stopped" and job.ending.kind == "signal"
    assert job.ending.detail == signal.Signals(signum).name and job.ending.exit_code == -signum
    assert job.ending.frame.file.endswith("ring_writer.py")  # where the training thread was
    records = list(segment.last(4096))
    steps = [r.step for r in records]  # a finished segment keeps only its newest records
    assert len(records) > 10 and steps == list(range(steps[0], steps[0] + len(steps)))
    assert_consecutive(records, segment.hot().head)


def test_sigkill_at_full_speed_never_yields_a_torn_record(tmp_path):
    for attempt in range(4):
        proc, path = start_writer(tmp_path / "ring", "raw", "64")
        time.sleep(0.2 + 0.05 * attempt)
        assert stop(proc, signal.SIGKILL) == -signal.SIGKILL
        segment = open_segment(path)
        head = segment.hot().head
        records = list(segment.last(64))
        assert segment.liveness() == "crashed" and head > 1000
        assert len(records) == 63 and all(consistent(r) for r in records)
        assert_consecutive(records, head)


def test_half_written_and_unpublished_records_are_never_returned(tmp_path):
    w = make_segment(tmp_path / "ring", capacity=16)
    for i in range(40):
        write(w, i)
    slot = fmt.HEADER_SIZE + (40 % 16) * fmt.RECORD_SIZE  # where index 40 goes next
    with open(w.path, "r+b") as f:  # a writer killed inside pack_into: seq new, the rest not
        f.seek(slot)
        f.write((41).to_bytes(8, "little") + b"\0" * 56)
    segment = open_segment(w.path)
    assert [r.seq for r in segment.last(16)] == list(range(26, 41))
    w2 = make_segment(tmp_path / "ring2", capacity=16)
    for i in range(40):
        write(w2, i)
    complete = bytearray(fmt.RECORD_SIZE)  # killed between the record and the head store
    fmt.RECORD.pack_into(complete, 0, 41, 40, 281, *([0] * 8), 0, 0, 0, 0, 0, 0, 0, 41)
    with open(w2.path, "r+b") as f:
        f.seek(slot)
        f.write(complete)
    records = list(open_segment(w2.path).last(16))
    assert [r.seq for r in records] == list(range(26, 41)) and all(map(consistent, records))


def test_torn_tag_in_the_middle_is_rejected_and_counted(tmp_path):
    w = make_segment(tmp_path / "ring", capacity=64)
    for i in range(50):
        write(w, i)
    segment = open_segment(w.path)
    with open(w.path, "r+b") as f:  # seq_end of index 20 from another lap
        f.seek(fmt.HEADER_SIZE + 20 * fmt.RECORD_SIZE + 120)
        f.write((21 + 64).to_bytes(8, "little"))
    result = segment.poll()
    assert result.rejected == 1 and result.lost == 0
    assert [r.seq for r in result.records] == [s for s in range(1, 51) if s != 21]


def test_restarted_trainer_old_segment_restarted_new_one_live(tmp_path):
    ring = tmp_path / "ring"
    first, _ = start_writer(ring, "probe", "restart-job")
    time.sleep(0.2)
    stop(first, signal.SIGKILL)
    second, _ = start_writer(ring, "probe", "restart-job")
    try:
        time.sleep(0.2)
        collector = JobCollector(str(ring))
        jobs = {job.pid: (job.state, job.ending) for job in collector.collect()}
        assert jobs.keys() == {first.pid, second.pid} and jobs[second.pid] == ("live", None)
        state, ending = jobs[first.pid]
        assert state == "restarted" and ending is not None and ending.kind == "gone"
        # The kernel's word where its log can be read (root): a SIGKILL, not the OOM killer.
        assert ending.kill is None or ending.kill.by == "sigkill"
    finally:
        stop(second, signal.SIGKILL)


def test_stopped_or_killed_monitor_never_blocks_the_writer(tmp_path):
    """The writer takes no lock and waits on nothing: it finishes with a frozen reader attached."""
    ring = tmp_path / "ring"
    ring.mkdir(mode=0o700)
    code = ("import sys; from traintop.collectors.ring_reader import open_segment, discover\n"
            "import time\nwhile not discover(sys.argv[1]): time.sleep(0.01)\n"
            "s = open_segment(discover(sys.argv[1])[0]); print('ok', flush=True)\n"
            "while True: s.poll(); s.liveness()\n")  # fmt: skip
    reader = subprocess.Popen([sys.executable, "-c", code, str(ring)], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    writer, path = start_writer(ring, "count", "300000")
    assert reader.stdout.readline().strip() == "ok"
    reader.send_signal(signal.SIGSTOP)
    try:
        assert writer.wait(timeout=120) == 0
        assert open_segment(path).liveness() == "finished"
        assert open_segment(path).hot().head == 300000
    finally:
        reader.kill()
        reader.wait()
