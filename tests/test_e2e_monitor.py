"""The monitor in a real terminal: tmux runs the installed `traintop` on the fake 8-GPU box.

Assertions look for what a person scans for (GPU names, throttle reasons, panel titles, the
interval in the header), not for exact layout, so widget work elsewhere does not break them.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.tmux import TmuxSession

pytestmark = pytest.mark.e2e

SCENARIOS = Path(__file__).parent / "fakenvml" / "scenarios"
THROTTLE = SCENARIOS / "h100x8_throttle.txt"
GPU_ROW = re.compile(r"^\W*\d H100( 80GB|…)", re.MULTILINE)
FIRST_FRAME_S = 60.0  # a loaded 2-core machine can take a while to import Textual
PANELS = ("1 GPU", "2 CPU", "3 Memory", "4 Disk", "5 Network", "6 Processes")

Start = Callable[..., TmuxSession]


@pytest.fixture
def monitor_env(tmp_path: Path, fake_nvml_lib: Path) -> dict[str, str]:
    """The fake 8-GPU library and a private ring directory (no jobs from other runs)."""
    ring = tmp_path / "ring"
    ring.mkdir(mode=0o700)
    return {
        "LD_LIBRARY_PATH": str(fake_nvml_lib.parent),
        "FAKE_NVML_SCENARIO": str(THROTTLE),
        "TRAINTOP_RING_DIR": str(ring),
    }


@pytest.fixture
def start(monitor_env: dict[str, str]) -> Iterator[Start]:
    """Open `traintop` in tmux; every session and its processes are killed at teardown."""
    sessions: list[TmuxSession] = []

    def open_session(*args: str, width: int = 200, height: int = 50, **env: str) -> TmuxSession:
        session = TmuxSession(["traintop", *args], width=width, height=height,
                              env={**monitor_env, **env})  # fmt: skip
        sessions.append(session)
        return session

    yield open_session
    for session in sessions:
        session.kill()


def gpu_rows(screen: str) -> list[str]:
    return [line for line in screen.splitlines() if GPU_ROW.match(line)]


def row_of(screen: str, index: int) -> str:
    (row,) = [r for r in gpu_rows(screen) if re.match(rf"^\W*{index} H100", r)]
    return row


def header(screen: str) -> str:
    return screen.splitlines()[0]


def assert_quits_cleanly(session: TmuxSession) -> None:
    """Exit status 0, the shell's marker visible, the alternate screen left."""
    assert session.exit_code(timeout=30) == 0
    assert "__EXIT=0" in session.screen()
    assert not session.alternate_screen()


def test_first_frame_shows_every_gpu_and_panel(start: Start) -> None:
    """The first complete frame already holds every panel with data.  tmux can be read while
    that frame is still being written, so the wait is for the whole of it (panels and footer)."""
    session = start()
    screen = session.wait_for(
        lambda s: len(gpu_rows(s)) == 8 and all(t in s for t in PANELS) and "Quit" in s,
        FIRST_FRAME_S,
    )
    assert "Thermal" in row_of(screen, 3)
    assert "HW Slow" in row_of(screen, 3)
    assert "SW Power Cap" in row_of(screen, 5)
    assert "699/700 W" in row_of(screen, 5)
    assert "Power" not in row_of(screen, 0)
    assert "590.48.01" in screen


def test_keys_toggle_interval_and_quit(start: Start) -> None:
    session = start()
    session.wait_for(lambda s: len(gpu_rows(s)) == 8, FIRST_FRAME_S)
    session.send("1")
    session.wait_for(lambda s: not gpu_rows(s) and "2 CPU" in s)
    session.send("1")
    session.wait_for(lambda s: len(gpu_rows(s)) == 8)
    assert "every 1s" in header(session.screen())
    session.send("+")
    session.wait_for(lambda s: "every 2s" in header(s))
    session.send("-", "-")
    session.wait_for(lambda s: "every 0.5s" in header(s))
    session.send("q")
    assert_quits_cleanly(session)


def test_help_opens_and_escape_closes(start: Start) -> None:
    session = start()
    session.wait_for(lambda s: len(gpu_rows(s)) == 8, FIRST_FRAME_S)
    session.send("?")
    session.wait_for(lambda s: "traintop keys" in s and "Quit" in s and "Pause" in s, 10)
    session.send("Escape")
    session.wait_for(lambda s: "traintop keys" not in s and len(gpu_rows(s)) == 8)


def _wakeups(pid: int) -> dict[str, int]:
    """Voluntary context switches so far of every thread of ``pid``: one per wake-up."""
    counts = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = (task / "status").read_text()
        counts[task.name] = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M)[1])
    return counts


def _wakeup_rates(pid: int, window_s: float) -> dict[str, float]:
    """Wake-ups a second of every thread of ``pid`` over the next ``window_s``."""
    before = _wakeups(pid)
    time.sleep(window_s)
    after = _wakeups(pid)
    return {tid: (after[tid] - before.get(tid, 0)) / window_s for tid in after}


def test_no_thread_polls_while_nobody_types(start: Start) -> None:
    """Textual's stock input thread woke ten times a second; at a 1 s interval no thread of
    ours needs to wake more than a few times (the sampler, the UI and the writer, per tick).
    A poller wakes that often in every window; a thread of ours that waits for the GIL on a
    loaded box wakes more in some (CI, beside the suite's jobs: 6 a second over one 4 s
    window), so a thread polls when it woke 8 times a second or more in two windows in a row.
    The keys still work: a lone Escape (a parser timeout) closes the help screen."""
    session = start("--interval", "1")
    session.wait_for(lambda s: len(gpu_rows(s)) == 8, FIRST_FRAME_S)
    pid = session.app_pid()
    time.sleep(3.0)  # start-up work (first diagnoses, layout) is not the steady state
    first, second = _wakeup_rates(pid, 3.0), _wakeup_rates(pid, 3.0)
    steady = {tid: min(rate, first.get(tid, rate)) for tid, rate in second.items()}
    assert max(steady.values()) < 8, (first, second)
    session.send("?")
    session.wait_for(lambda s: "traintop keys" in s, 10)
    session.send("Escape")
    session.wait_for(lambda s: "traintop keys" not in s and len(gpu_rows(s)) == 8)


def test_pause_shows_indicator_and_resume_clears_it(start: Start) -> None:
    session = start()
    session.wait_for(lambda s: len(gpu_rows(s)) == 8, FIRST_FRAME_S)
    session.send("p")
    session.wait_for(lambda s: "PAUSED" in header(s))
    session.send("p")
    session.wait_for(lambda s: "PAUSED" not in header(s))
    session.send("q")
    assert_quits_cleanly(session)


def test_pause_freezes_the_clock(start: Start) -> None:
    session = start()
    session.wait_for(lambda s: len(gpu_rows(s)) == 8, FIRST_FRAME_S)
    session.send("p")
    frozen = header(session.wait_for(lambda s: "PAUSED" in header(s)))
    time.sleep(2.5)  # proving that nothing changes needs a span of time; ticks are 1 s
    assert header(session.screen()) == frozen


def test_small_terminal_is_readable(start: Start) -> None:
    session = start(width=80, height=24)
    screen = session.wait_for(lambda s: len(gpu_rows(s)) == 8, FIRST_FRAME_S)
    assert "SW Power Cap" in row_of(screen, 5)
    assert "2 CPU" in screen


def test_too_small_terminal_then_resize_back(start: Start) -> None:
    session = start()
    session.wait_for(lambda s: len(gpu_rows(s)) == 8, FIRST_FRAME_S)
    session.resize(40, 10)
    session.wait_for(lambda s: "Terminal too small" in s and not gpu_rows(s))
    session.resize(200, 50)
    session.wait_for(lambda s: len(gpu_rows(s)) == 8 and "Terminal too small" not in s)
    session.send("q")
    assert_quits_cleanly(session)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_exits_zero_and_restores_terminal(start: Start, signum: signal.Signals) -> None:
    session = start()
    session.wait_for(lambda s: len(gpu_rows(s)) == 8, FIRST_FRAME_S)
    os.kill(session.app_pid(), signum)
    assert_quits_cleanly(session)


def test_no_color(start: Start) -> None:
    session = start(NO_COLOR="1")
    screen = session.wait_for(lambda s: len(gpu_rows(s)) == 8, FIRST_FRAME_S)
    assert "SW Power Cap" in row_of(screen, 5)
    session.send("q")
    assert_quits_cleanly(session)


def test_without_nvml_the_rest_works(start: Start, tmp_path: Path) -> None:
    empty = tmp_path / "no-nvml"
    empty.mkdir()
    session = start(LD_LIBRARY_PATH=str(empty))
    screen = session.wait_for(lambda s: "6 Processes" in s and "2 CPU" in s, FIRST_FRAME_S)
    session.wait_for(lambda s: "NVML" in s and "not found" in s)
    assert not gpu_rows(screen)
    session.send("q")
    assert_quits_cleanly(session)


def test_lost_gpu_while_others_go_on(start: Start, tmp_path: Path) -> None:
    scenario = tmp_path / "lose_gpu1.txt"
    scenario.write_text(THROTTLE.read_text() + "1 lose_after_s 2\n")
    session = start(FAKE_NVML_SCENARIO=str(scenario))
    session.wait_for(lambda s: len(gpu_rows(s)) == 8, FIRST_FRAME_S)
    screen = session.wait_for(lambda s: "LOST" in s, 30)
    lost = [line for line in screen.splitlines() if "LOST" in line]
    assert len(lost) == 1
    assert re.match(r"^\W*1 H100", lost[0])
    assert len(gpu_rows(screen)) == 8
    before = header(screen)
    after = session.wait_for(lambda s: header(s) != before and "LOST" in s)
    assert "SW Power Cap" in row_of(after, 5)
