"""The monitor's first frame in a raw pseudo-terminal, beside htop and a one-line Textual app.

Each tool starts in a fresh 200x50 pty (no tmux between it and the clock: through tmux a
one-line Textual app reads 0.5 s, tmux's own redraw); its frame is complete once the text that
says it is up has come (``H100`` for traintop, and the job's name with a job; ``Load average``
for htop; ``floor`` for the Textual app) and the output has then been quiet for 0.3 s: the
time is that of the last byte before the pause, what a person waits for before the screen
stops changing.  The tools run interleaved, ``--rounds`` times in each state (no job; one
8-rank job at 20 steps/s a rank from benchmarks/ring_load.py), so a busy minute of a shared
box hits them all alike; the medians, traintop's ratio to the Textual app (target <= 1.5x)
and to htop, and the load average come from one run.  8 fake H100s come from the C-ABI fake
NVML.  Usage::

    python benchmarks/bench_first_frame.py [--rounds 5] [--states "no job,one 8-rank job"]
        [--tree SOURCE_TREE ...] [--paints]

``--callgrind`` counts instead the instructions each traintop and the Textual app execute up to
the last byte of their first frame (benchmarks/frame_count.py under valgrind's callgrind, in the
same pty): the same figure on a loaded box as on an idle one, where wall times move by tens of
percent.  ``--tree`` (repeatable) adds traintop run from another source tree (``git worktree
add`` or ``git archive`` of a commit) to the same interleaved rounds, as ``traintop@NAME``: a
before and after in one run.  ``--paints`` also prints, per state, the median count of bursts
of output traintop wrote up to its first complete frame (a pause of 20 ms or more between two).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_collect import start_jobs, wait_for_segments  # noqa: E402
from bench_monitor import compile_tree, fake_nvml_env, floor_tool  # noqa: E402

QUIET_S = 0.3
LIMIT_S = 15.0
PAINT_GAP_S = 0.02  # output this far apart is two paints, not one write split by the kernel
SIZE = (50, 200)  # rows, columns
STATES = ("no job", "one 8-rank job")
TARGET = 1.5


@dataclass(frozen=True, slots=True)
class Frame:
    """One start of one tool: when its first frame was complete, and how many bursts of
    output came before it (the first frame counts as one)."""

    seconds: float
    paints: int


def _spawn(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    """``argv`` on the slave side of a new 200x50 pty, as its session's controlling terminal;
    returns the process and the master's descriptor."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *SIZE, 0, 0))
    proc = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, **env, "TERM": "xterm-256color", "COLUMNS": "200", "LINES": "50"},
        start_new_session=True,
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        close_fds=True,
    )
    os.close(slave)
    return proc, master


def _read(master: int, wait_s: float) -> bytes | None:
    """What the tool wrote within ``wait_s`` (b"" for nothing); None once the pty is closed."""
    ready, _, _ = select.select([master], [], [], max(0.0, wait_s))
    if not ready:
        return b""
    try:
        return os.read(master, 65536)
    except OSError:  # EIO: every slave descriptor is closed, the tool has exited
        return None


def first_frame(argv: list[str], ready: tuple[str, ...], env: dict[str, str]) -> Frame:
    """Start ``argv`` and time its first complete frame (see the module's docstring)."""
    t0 = time.monotonic()
    proc, master = _spawn(argv, env)
    seen, last, paints, missing = b"", None, 0, [r.encode() for r in ready]
    try:
        while time.monotonic() - t0 < LIMIT_S:
            quiet_for = QUIET_S if last is None or missing else QUIET_S - (time.monotonic() - last)
            data = _read(master, quiet_for)
            now = time.monotonic()
            if data is None:
                raise RuntimeError(f"{argv[0]} exited before its first frame: {seen[-400:]!r}")
            if data:
                paints += last is None or now - last >= PAINT_GAP_S
                last, seen = now, (seen + data)[-65536:]
                missing = [m for m in missing if m not in seen]
            elif last is not None and not missing and now - last >= QUIET_S:
                return Frame(last - t0, paints)
        raise RuntimeError(f"{argv[0]} showed no complete frame in {LIMIT_S:.0f} s")
    finally:
        _end(proc, master)


def _end(proc: subprocess.Popen, master: int) -> None:
    """Stop the tool and its session, drain the pty so nothing blocks on a write, and let the
    machine settle so one tool's exit never lands in the next one's start."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + 2.0
        while proc.poll() is None and time.monotonic() < deadline:
            _read(master, 0.05)
        if proc.poll() is not None:
            break
    os.close(master)
    time.sleep(0.5)


def tools(args: argparse.Namespace, state: str) -> dict[str, tuple[list[str], tuple[str, ...]]]:
    """Each tool's command and the text its first frame holds."""
    installed = shutil.which("traintop")
    traintop = [installed, "--interval", "1"] if installed else [sys.executable, "-m",
                "traintop.cli.main", "--interval", "1"]  # fmt: skip
    marks = ("H100", "job1") if state != "no job" else ("H100",)
    chosen = {"traintop": (traintop, marks)}
    for tree in args.tree:
        module = [sys.executable, "-m", "traintop.cli.main", "--interval", "1"]
        chosen[f"traintop@{Path(tree).name}"] = (["env", "-C", tree, f"PYTHONPATH={tree}", *module],
                                                 marks)  # fmt: skip
    if shutil.which("htop"):
        chosen["htop"] = (["htop", "-d", "10"], ("Load average",))
    floor_argv, floor_mark = floor_tool()
    chosen["textual"] = (floor_argv, (floor_mark,))
    return chosen


def measure(state: str, args: argparse.Namespace, env: dict[str, str]) -> dict[str, list[Frame]]:
    """Every tool ``--rounds`` times in ``state``, interleaved, in one ring directory."""
    with tempfile.TemporaryDirectory(prefix="tt-first-frame-") as tmp:
        ring = os.path.join(tmp, "ring")
        os.mkdir(ring, 0o700)
        env = {**env, "TRAINTOP_RING_DIR": ring}
        writers = []
        if state != "no job":
            writers = start_jobs(ring, 1, 8, 20.0, args.rounds * 60 + 120)
            wait_for_segments(ring, 8)
        chosen, frames = tools(args, state), {}
        try:
            for _ in range(args.rounds):
                for tool, (argv, marks) in chosen.items():
                    frames.setdefault(tool, []).append(first_frame(argv, marks, env))
        finally:
            for proc in writers:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
    return frames


def count_frame(tool: str, tree: str | None, env: dict[str, str]) -> int:
    """Instructions ``tool`` (traintop, or textual: the one-line app) executes up to the last
    write of its first frame, under callgrind."""
    out = Path(tempfile.mkdtemp(prefix="tt-frame-cg-"))
    argv = ["valgrind", "--tool=callgrind", "--dump-instr=no", f"--callgrind-out-file={out}/cg",
            sys.executable, str(Path(__file__).with_name("frame_count.py")), tool]  # fmt: skip
    if tree is not None:
        argv = ["env", "-C", tree, f"PYTHONPATH={tree}", *argv]
    proc, master = _spawn(argv, {**env, "PYTHONHASHSEED": "0"})
    try:
        while _read(master, 600) is not None:
            pass
    finally:
        _end(proc, master)
    total = 0
    for dump in out.glob("cg.*"):
        text = dump.read_text(errors="replace")
        if "Client Request: write " in text:
            total += next(int(line.split()[1]) for line in text.splitlines()
                          if line.startswith(("summary:", "totals:")))  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    return total


def count(state: str, args: argparse.Namespace, env: dict[str, str]) -> None:
    """Print each tool's first frame in instructions, and traintop's ratio to the app's."""
    with tempfile.TemporaryDirectory(prefix="tt-first-frame-") as tmp:
        ring = os.path.join(tmp, "ring")
        os.mkdir(ring, 0o700)
        writers = start_jobs(ring, 1, 8, 20.0, 1800) if state != "no job" else []
        if writers:
            wait_for_segments(ring, 8)
        env = {**env, "TRAINTOP_RING_DIR": ring}
        try:
            counts = {"textual": count_frame("textual", None, env)}
            counts["traintop"] = count_frame("traintop", None, env)
            for tree in args.tree:
                counts[f"traintop@{Path(tree).name}"] = count_frame("traintop", tree, env)
        finally:
            for proc in writers:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
    print(f"\n{state}: first frame in instructions (callgrind, to its last write)")
    for tool, total in counts.items():
        ratio = "" if tool == "textual" else f"  {total / counts['textual']:.2f}x the Textual app"
        print(f"  {tool:<14} {total / 1e6:7.0f} M{ratio}")


def report(state: str, frames: dict[str, list[Frame]], paints: bool) -> bool:
    """Print one state's medians and ratios; whether traintop met the target."""
    median = {tool: statistics.median(f.seconds for f in runs) for tool, runs in frames.items()}
    print(f"\n{state}: first frame (until quiet {QUIET_S} s, raw pty 200x50, "
          f"median of {len(frames['traintop'])}, interleaved)")  # fmt: skip
    for tool, runs in frames.items():
        each = ", ".join(f"{f.seconds:.3f}" for f in runs)
        print(f"  {tool:<14} {median[tool]:.3f} s  ({each})")
    for tool in (t for t in median if t.startswith("traintop")):
        ratio = median[tool] / median["textual"]
        htop = f"; {median[tool] / median['htop']:.2f}x htop" if "htop" in median else ""
        print(f"  {tool} {ratio:.2f}x the one-line Textual app (<= {TARGET}) "
              f"{'met' if ratio <= TARGET else 'NOT met'}{htop}")  # fmt: skip
    met = median["traintop"] / median["textual"] <= TARGET
    if paints:
        counts = [f.paints for f in frames["traintop"]]
        print(f"  traintop paints to its first frame: median {statistics.median(counts):g} "
              f"({', '.join(map(str, counts))})")  # fmt: skip
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--states", default=",".join(STATES))
    parser.add_argument("--tree", action="append", default=[],
                        help="also run traintop from this source tree (repeatable)")  # fmt: skip
    parser.add_argument("--paints", action="store_true", help="count traintop's paints too")
    parser.add_argument("--callgrind", action="store_true",
                        help="count instructions to the first frame, not time")  # fmt: skip
    args = parser.parse_args()
    states = [s.strip() for s in args.states.split(",") if s.strip()]
    unknown = [s for s in states if s not in STATES]
    if unknown:
        parser.error(f"unknown state {unknown[0]!r}; choose from: {', '.join(STATES)}")
    for tree in [ROOT, *map(Path, args.tree)]:
        compile_tree(tree)
    env = fake_nvml_env()
    if args.callgrind:
        for state in states:
            count(state, args, env)
        return 0
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    met = [report(state, measure(state, args, env), args.paints) for state in states]
    print("load average after:  {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0 if all(met) else 1


if __name__ == "__main__":
    sys.exit(main())
