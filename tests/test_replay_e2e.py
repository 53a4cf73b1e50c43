"""End to end in tmux: record with `R` in the live monitor, then `traintop replay` shows the very
panel values the live monitor showed at that moment."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.tmux import TmuxSession

pytestmark = pytest.mark.e2e

THROTTLE = Path(__file__).parent / "fakenvml" / "scenarios" / "h100x8_throttle.txt"
# Rows whose numbers change every tick: GPUs, the CPU average and cores, memory, and the top of
# the process table (the replay screen has one row less for it: the timeline).
PANEL_ROW = re.compile(r"H100 80GB|avg\[|\b\d+\[[|\s]*\]\s+\d+%|Mem\[")
PROCESS_ROW = re.compile(r"^│\s+\d+ \S+\s+(?:[A-Z]\s+)?[\d.]+ ")  # PID USER [S] CPU%
TOP_PROCESSES = 5
FIRST_FRAME_S = 60.0


# A sparkline: the history before the moment, which holds samples from before `R` was pressed
# live and only recorded ones in replay; every number on the row must match.
SPARKLINE = re.compile(r"(?<= )[▁▂▃▄▅▆▇█][▁▂▃▄▅▆▇█ ]*")


def panel_rows(screen: str) -> list[str]:
    lines = screen.splitlines()
    panels = [SPARKLINE.sub("", line) for line in lines if PANEL_ROW.search(line)]
    # Processes tied on CPU % keep the order they had on screen before: compared as a set, and
    # without those tied with the first row left out (which of them made the cut is the order's:
    # live it kept "bash .ci/run" at 0.0 % where the replay kept another process at 0.0 %).
    rows = [line for line in lines if PROCESS_ROW.match(line)]
    cut = _cpu(rows[TOP_PROCESSES]) if len(rows) > TOP_PROCESSES else None
    top = sorted(row for row in rows[:TOP_PROCESSES] if _cpu(row) != cut)
    return [" ".join(row.strip(" │").split()) for row in panels + top]


def _cpu(row: str) -> str:
    """A process row's CPU % as shown."""
    match = PROCESS_ROW.match(row)
    return match[0].split()[-1] if match else ""


def _env(tmp_path: Path, fake_nvml_lib: Path) -> dict[str, str]:
    ring = tmp_path / "ring"
    ring.mkdir(mode=0o700)
    return {"LD_LIBRARY_PATH": str(fake_nvml_lib.parent), "FAKE_NVML_SCENARIO": str(THROTTLE),
            "TRAINTOP_RING_DIR": str(ring), "TZ": "UTC"}  # fmt: skip


def _record_live(tmp_path: Path, env: dict[str, str]) -> tuple[list[str], Path]:
    """Record a few seconds with `R`; the panel rows seen while paused in the middle."""
    with TmuxSession(["traintop"], env=env, cwd=str(tmp_path)) as live:
        live.wait_for("H100", timeout=FIRST_FRAME_S)
        live.send("R")
        live.wait_for("REC traintop-")
        time.sleep(4.0)
        live.send("p")
        seen = panel_rows(live.wait_for("PAUSED"))
        time.sleep(2.0)
        live.send("p")
        live.send("R")
        live.wait_for(lambda s: "REC" not in s.splitlines()[0])
        live.send("q")
        assert live.exit_code(timeout=30) == 0
    (path,) = tmp_path.glob("traintop-*.ttrec")
    return seen, path


def _position(screen: str) -> str | None:
    match = re.search(r"(\d+)/(\d+)\s", screen)
    return match[0] if match else None


def test_replay_shows_the_values_the_live_monitor_showed(tmp_path, fake_nvml_lib):
    env = _env(tmp_path, fake_nvml_lib)
    seen, path = _record_live(tmp_path, env)
    assert len(seen) >= 8 + 3 + 1, seen  # GPUs, CPU average and cores, memory, a process
    with TmuxSession(["traintop", "replay", str(path)], env=env, cwd=str(tmp_path)) as replay:
        screen = replay.wait_for("REPLAY", timeout=FIRST_FRAME_S)
        replay.send("g")
        replay.wait_for("go to:")
        time.sleep(0.5)  # the input takes focus once the dialog is up; tmux types faster
        replay.send("+0", "Enter")
        replay.wait_for(lambda s: "go to:" not in s)
        replay.send(",")  # a step pauses: from here on the screen moves only when told
        screen = replay.wait_for(lambda s: " 1/" in s and "⏸" in s)
        count = int(re.search(r" 1/(\d+)", screen)[1])
        shown = []
        for i in range(count):
            shown.append(panel_rows(screen))
            if shown[-1] == seen:
                return
            if i + 1 < count:
                here = _position(screen)
                replay.send(".")
                screen = replay.wait_for(lambda s, here=here: _position(s) != here)
    best = max(shown, key=lambda rows: sum(a == b for a, b in zip(rows, seen, strict=False)))
    diff = [f"live:   {a}\nreplay: {b}" for a, b in zip(seen, best, strict=False) if a != b]
    diff += [f"live only:   {row}" for row in seen[len(best) :]]
    diff += [f"replay only: {row}" for row in best[len(seen) :]]
    pytest.fail("no replayed sample showed the live rows; closest differs in:\n" + "\n".join(diff))
