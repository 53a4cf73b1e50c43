"""Stacks on demand without ptrace: the rank's helper thread (traintop/stack_helper.py) and the
monitor's client (collectors/stacks.py), the faulthandler fallback when C code holds the GIL,
and the signal's choice and safety.

The GIL cases run a real Python process (no torch: the probe alone) that calls libc's sleep
through ``ctypes.PyDLL``, which keeps the GIL for as long as it sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.isolation import private_dir
from tests.polling import eventually
from traintop import ring_paths, stack_helper
from traintop.collectors.jobs import JobCollector
from traintop.collectors.ring_reader import open_segment
from traintop.collectors.stacks import StackClient, thread_frames, wait_for
from traintop.probe import Probe
from traintop.ring import RingWriter
from traintop.ring_format import ALIVE_EVERY_S

REPO = Path(__file__).resolve().parents[1]
GIL_HOLDER = textwrap.dedent(
    """
    import ctypes, sys, traintop

    def hold_the_gil():
        ctypes.PyDLL(None).sleep(30)
        print("woke", flush=True)

    probe = traintop.attach(name="gil")
    probe.step()
    print(probe._writer.path, flush=True)
    hold_the_gil()
    """
)


@pytest.mark.parametrize(
    ("text", "number"),
    [
        (None, signal.SIGRTMIN + 6),
        ("off", 0),
        ("0", 0),
        ("SIGUSR2", signal.SIGUSR2),
        ("usr2", signal.SIGUSR2),
        ("SIGRTMIN+3", signal.SIGRTMIN + 3),
        ("40", 40),
        ("SIGKILL", 0),  # never a signal that cannot be caught
        ("nonsense", 0),
    ],
)
def test_the_signal_is_configurable_and_can_be_turned_off(text, number, monkeypatch) -> None:
    monkeypatch.delenv(stack_helper.ENV_SIGNAL, raising=False)
    assert stack_helper.stack_signal(text or "") == number


def probe_in(directory: Path) -> Probe:
    probe = Probe("job", writer_factory=lambda phases: RingWriter.create(
        name="job", phases=phases, directory=str(directory)))  # fmt: skip
    probe._on_segment = lambda writer: stack_helper.start(probe, writer)
    probe.step()
    return probe


def test_the_helper_answers_with_the_training_threads_stack_and_samples(tmp_path: Path) -> None:
    ring_dir = private_dir(tmp_path / "ring")
    probe = probe_in(ring_dir)
    path = probe._writer.path
    with open_segment(path) as segment:
        client = StackClient(path, segment.header)
        assert client.ask(time.monotonic())
        wait_for(client, segment.hot)
        taken = client.taken
        assert taken is not None and taken.source == "helper"
        functions = [f.function for f in taken.frames]
        assert "test_the_helper_answers_with_the_training_threads_stack_and_samples" in functions
        assert not any("/traintop/" in f.file and "stack_helper" in f.file for f in taken.frames)
        assert client.ask_samples(time.monotonic(), None, 4, 10)
        assert eventually(lambda: (client.poll(time.monotonic(), None), client.samples)[1])
        samples, _at = client.samples
        assert samples.taken == 4 and samples.matched == 4 and samples.stacks
    probe.close()
    leftovers = [p.name for p in ring_dir.iterdir() if ring_paths.SIDE_NAME_RE.match(p.name)]
    assert leftovers == []  # FIFO, fault file and replies go with the helper


def test_a_rank_killed_in_a_long_wait_ends_stalled_for_a_reader_that_came_after(tmp_path) -> None:
    """Its helper wakes every ALIVE_EVERY_S and says so: a one-shot `traintop jobs` after the
    SIGKILL knows the rank was alive long after its last step, so it ended at 0 steps/s."""
    ring_dir = private_dir(tmp_path / "ring")
    script = textwrap.dedent(
        """
        import sys, time, traintop
        probe = traintop.attach(name="waits")
        for _ in range(20):
            time.sleep(0.01)
            probe.step()
        print(probe._writer.path, flush=True)
        time.sleep(60)  # a data wait that never ends
        """
    )
    env = {**os.environ, "TRAINTOP_RING_DIR": str(ring_dir), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE)
    try:
        path = proc.stdout.readline().decode().strip()
        killed_after_s = 6.0  # three of the helper's alive words after the last step
        time.sleep(killed_after_s)
    finally:
        proc.kill()
        proc.wait()
    collector = JobCollector(str(ring_dir))
    (job,) = collector.collect()
    collector.close()
    with open_segment(path) as segment:
        (last,) = segment.last(1)
        last_step_ns = last.t_start_ns + sum(last.phase_ns)
    assert job.state == "gone" and job.steps_per_s == 0.0  # a SIGKILL leaves no word
    lived_s = job.ended_at - _wall(segment.header, last_step_ns)
    assert killed_after_s - 2 * ALIVE_EVERY_S - 1 < lived_s <= killed_after_s + 1


def _wall(header, monotonic_ns: int) -> float:
    return (header.created_realtime_ns - header.created_monotonic_ns + monotonic_ns) / 1e9


def test_no_helper_when_switched_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(stack_helper.ENV_STACKS, "0")
    ring_dir = private_dir(tmp_path / "ring")
    probe = probe_in(ring_dir)
    assert not list(ring_dir.glob("*.ask"))
    with open_segment(probe._writer.path) as segment:
        assert not StackClient(probe._writer.path, segment.header).ask(time.monotonic())
    probe.close()


def gil_holder(tmp_path: Path, signal_setting: str) -> tuple[subprocess.Popen, Path]:
    ring_dir = private_dir(tmp_path / "ring")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRAINTOP_RING_DIR": str(ring_dir),
           stack_helper.ENV_SIGNAL: signal_setting}  # fmt: skip
    script = tmp_path / "gil.py"
    script.write_text(GIL_HOLDER)
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    return proc, Path(proc.stdout.readline().strip())


def test_c_code_holding_the_gil_is_dumped_by_faulthandler_and_keeps_running(tmp_path) -> None:
    """The helper cannot run; the signal goes to it, faulthandler dumps from C, and the
    training thread's C call is not interrupted (the signal was for the helper thread)."""
    proc, path = gil_holder(tmp_path, "")
    try:
        time.sleep(0.3)  # the PyDLL call has the GIL now
        with open_segment(path) as segment:
            client = StackClient(path, segment.header)
            assert client.ask(time.monotonic())
            wait_for(client, segment.hot, timeout_s=4.0)
            taken = client.taken
        assert taken is not None and taken.source == "signal"
        assert taken.frames[-1].function == "hold_the_gil"
        assert taken.frames[-1].code == "ctypes.PyDLL(None).sleep(30)"
        time.sleep(0.5)
        assert proc.poll() is None  # still sleeping: its sleep was not cut short
    finally:
        proc.kill()
        proc.wait()
    assert "woke" not in proc.stdout.read()


def test_a_process_that_handles_no_stack_signal_is_never_sent_one(tmp_path: Path) -> None:
    """Signal off: an unanswered request gets no signal (its default action would kill)."""
    proc, path = gil_holder(tmp_path, "off")
    try:
        time.sleep(0.3)
        with open_segment(path) as segment:
            assert segment.hot().stack_signal == 0
            client = StackClient(path, segment.header)
            client.ask(time.monotonic())
            wait_for(client, segment.hot, timeout_s=2.0)
            assert client.taken is None
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


DUMP = """\
Thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/w/other.py", line 5 in loop

Current thread 0x00007f0000000001 (most recent call first):
  File "/w/train.py", line 88 in log_metrics
  File "/w/train.py", line ??? in train
  File "/w/train.py", line 140 in <module>
"""


def test_a_faulthandler_dump_is_read_for_the_training_thread_only() -> None:
    frames = thread_frames(DUMP, 0x7F0000000001)
    assert [(f.file, f.line, f.function) for f in frames] == [
        ("/w/train.py", 140, "<module>"),
        ("/w/train.py", 0, "train"),
        ("/w/train.py", 88, "log_metrics"),
    ]
    assert thread_frames(DUMP, 0x1234) is None
