"""Which steps a recording keeps (`--job`, `run --record`), and reading a file while it grows."""

from __future__ import annotations

import dataclasses
import os
import time

from tests.snapshot_fixtures import series
from tests.store_test_headers import header
from traintop.store.reader import Recording
from traintop.store.tap import JobMatch
from traintop.store.writer import FLUSH_S, Recorder


def test_a_pid_matches_itself_and_its_descendants():
    """`traintop run --record` watches torchrun's pid; the ranks are its children."""
    me = dataclasses.replace(header(), pid=os.getpid())
    assert JobMatch(pid=os.getppid())(me)  # this process descends from its parent
    assert JobMatch(pid=os.getpid())(me)
    assert not JobMatch(pid=os.getpid())(dataclasses.replace(header(), pid=os.getppid()))


def test_a_name_matches_every_rank_of_that_job():
    match = JobMatch(name="llama")
    assert match(header(0, "llama")) and match(header(7, "llama"))
    assert not match(header(0, "bert"))
    assert JobMatch()(header(0, "anything"))


def test_a_recording_can_be_read_while_it_is_written(tmp_path):
    path = tmp_path / "live.ttrec"
    recorder = Recorder(path)
    try:
        for snap in series(3):
            recorder.add_sample(snap, None)
        time.sleep(FLUSH_S * 2.5)
        with Recording(path) as rec:
            assert len(rec.samples) == 3
            assert rec.sample(2)[0].timestamp == series(3)[2].timestamp
    finally:
        recorder.stop()
    assert recorder.error is None
