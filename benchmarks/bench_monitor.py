"""Benchmark the monitor in the states its users are in, beside htop and glances, in one run.

States: no training job; one 8-rank job (each rank 20 steps/s); 8 jobs x 8 ranks (64 live
ranks); 24 finished runs of a sweep (segments ended minutes ago).  Writers are
benchmarks/ring_load.py processes (one per rank, a launcher as their parent, like torchrun) in a
private ring directory; 8 fake H100s (one throttling) come from the C-ABI fake NVML.  Every tool
runs in tmux at 200x50 with a 1 s interval; per run: CPU as % of one core over the steady
window, peak RSS, the first full frame's time, and the bytes the tool wrote to its terminal
(``tmux pipe-pane``: what SSH would carry) for the first frame and then per second.  Figures
and ratios come from one run, side by side with the baselines measured the same way, because
absolute numbers on a noisy 2-core VM mean little.  Usage::

    python benchmarks/bench_monitor.py [--seconds 30] [--repeat 3] [--skip-baselines]
        [--states "no job,one 8-rank job,8 jobs x 8 ranks,24 finished"] [--glances PATH]
    python benchmarks/bench_monitor.py --first-frames 5 [--glances PATH]
    python benchmarks/bench_monitor.py --gpu-box PATH_TO_NVITOP [--seconds 30] [--repeat 3]
        [--tree OLD_SOURCE_TREE]
    python benchmarks/bench_monitor.py ... --before OLD_SOURCE_TREE

``--before`` runs traintop from an older source tree too, as one more tool ("before"),
interleaved with this tree's in every state (and beside nvitop with ``--gpu-box``), and says how
many points of a core this tree adds to it (issue 43: at most 0.1).

``--repeat`` runs everything that many times, interleaved, and reports medians (and each run).
htop and glances run in the one-8-rank-job state, the one the targets compare against; one
that cannot be found is named before the run starts, and a target it would check says so.

Targets (issue 10): <= 1.5 % of one core and <= glances with one 8-rank job; <= 2.0 % with 64
live ranks; 24 finished segments add <= 0.1 points to the no-job figure; peak RSS <= 80 MB
everywhere; first frame <= 60 KiB and <= 4 KiB/s afterwards over the pty.  ``collect()`` per
live rank at 2,000 steps/s: benchmarks/bench_collect.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_collect import finished_sweep, start_jobs, wait_for_segments  # noqa: E402

from tests.fakenvml.build import build_fake_nvml  # noqa: E402
from traintop.views.job_groups import ENDED_COLLAPSE_S  # noqa: E402

SCENARIO = ROOT / "tests" / "fakenvml" / "scenarios" / "h100x8_throttle.txt"
CLK_TCK = os.sysconf("SC_CLK_TCK")


PACKAGE_DIRS = ("traintop", "cli", "collectors", "diagnosis", "exporter", "fleet", "pipeline",
                "store", "tui", "views")  # fmt: skip


def compile_tree(tree: Path = ROOT) -> None:
    """Byte-compile the source tree, as ``pip install`` does: a user's first start reads .pyc
    files, and an environment with PYTHONDONTWRITEBYTECODE would compile every module of an
    editable checkout on every start (about a second on this VM), which no user pays."""
    dirs = [str(tree / d) for d in PACKAGE_DIRS if (tree / d).is_dir()]
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *dirs],
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    )


def fake_nvml_env() -> dict[str, str]:
    """Environment that makes pynvml load the fake 8-GPU library."""
    built = Path(build_fake_nvml(Path(tempfile.gettempdir()) / "traintop-bench-nvml"))
    lib_dir = built if built.is_dir() else built.parent
    return {"LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_SCENARIO": str(SCENARIO)}


def sample_cost_us(rounds: int = 200, gap_s: float = 0.0) -> tuple[float, float]:
    """Median µs of one full sample (8 fake GPUs + host), and of the GPU part alone.

    With ``gap_s`` = 0 the samples run back to back (warm caches); with a 1 s gap each one
    starts cold, as in the monitor, which costs about twice as much.
    """
    code = (
        "import time, statistics\n"
        "from traintop.collectors.factory import build_collectors\n"
        "from traintop.collectors.sampler import Sampler\n"
        "c = build_collectors()\n"
        "s = Sampler(c, interval_s=1.0)\n"
        "s.sample_once(); c.gpu.collect()\n"
        "full=[]; gpu=[]\n"
        f"for _ in range({rounds}):\n"
        f"    time.sleep({gap_s})\n"
        "    t=time.thread_time_ns(); s.sample_once(); full.append(time.thread_time_ns()-t)\n"
        "    t=time.thread_time_ns(); c.gpu.collect(); gpu.append(time.thread_time_ns()-t)\n"
        "print(statistics.median(full)/1e3, statistics.median(gpu)/1e3)\n"
    )
    env = {**os.environ, **fake_nvml_env(), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()
    return float(out[0]), float(out[1])


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


TMUX_SOCKET = f"ttbench-{os.getpid()}"  # this run's own server: kill-server ends no one else's


def _tmux(*args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["tmux", "-L", TMUX_SOCKET, *args], capture_output=True, text=True, env=env, check=False
    ).stdout


def _wait_gone(pid: int, timeout_s: float = 10.0) -> None:
    """Wait until ``pid`` has exited and the machine has settled, so that one tool's shutdown
    never lands in the next tool's first-frame or CPU window."""
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(2.0)


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _start_in_tmux(argv: list[str], env: dict[str, str], tmp: Path) -> float:
    """``argv`` in a fresh 200x50 pane whose output goes to ``tmp/pty.log``; the go time.

    The pane's shell waits for a go file, so pipe-pane is recording before the tool writes its
    first byte."""
    _tmux("kill-server")
    full_env = {**os.environ, **env, "TERM": "xterm-256color"}
    go, log = tmp / "go", tmp / "pty.log"
    cmd = f"while [ ! -e {go} ]; do sleep 0.01; done; exec {' '.join(argv)}"
    _tmux("new-session", "-d", "-s", "b", "-x", "200", "-y", "50", cmd, env=full_env)
    _tmux("pipe-pane", "-o", "-t", "b", f"cat >> {log}")
    t0 = time.monotonic()
    go.touch()
    return t0


def run_in_tmux(argv: list[str], ready: str, seconds: float, env: dict[str, str]) -> dict:
    """Start argv in a 200x50 tmux pane, time its first frame, then its CPU over `seconds`.

    The first frame's bytes are those written until the frame is complete on screen and the
    output has been quiet for 0.3 s.
    """
    with tempfile.TemporaryDirectory(prefix="d2-bench-") as tmp:
        log = Path(tmp) / "pty.log"
        t0 = _start_in_tmux(argv, env, Path(tmp))
        first_frame_s = _wait_for(ready, t0, argv[0])
        first_bytes = _quiet_size(log)
        pid = int(_tmux("display-message", "-p", "-t", "b", "#{pane_pid}").strip())
        time.sleep(2.0)  # let start-up work finish before the steady-state window
        cpu0, w0, b0 = _proc_cpu_s(pid), time.monotonic(), _size(log)
        time.sleep(seconds)
        cpu1, w1, b1 = _proc_cpu_s(pid), time.monotonic(), _size(log)
        rss = _peak_rss_mb(pid)
        _tmux("kill-server")
        _wait_gone(pid)
    return {
        "first_frame_s": first_frame_s,
        "cpu_pct": 100 * (cpu1 - cpu0) / (w1 - w0),
        "peak_rss_mb": rss,
        "first_kib": first_bytes / 1024,
        "kib_per_s": (b1 - b0) / 1024 / (w1 - w0),
    }


def _wait_for(ready: str, t0: float, name: str) -> float:
    while ready not in _tmux("capture-pane", "-p", "-t", "b"):
        if time.monotonic() - t0 > 60:
            raise RuntimeError(f"{name} never showed {ready!r}")
        time.sleep(0.005)
    return time.monotonic() - t0


def _quiet_size(log: Path, quiet_s: float = 0.3, limit_s: float = 3.0) -> int:
    """Bytes in the log once nothing was added for ``quiet_s`` (or after ``limit_s``)."""
    deadline, size = time.monotonic() + limit_s, -1
    while time.monotonic() < deadline:
        now = _size(log)
        if now == size:
            return now
        size = now
        time.sleep(quiet_s)
    return _size(log)


def first_frame_s(
    argv: list[str], env: dict[str, str], quiet_s: float = 0.3, limit_s: float = 10.0
) -> float:
    """Seconds from the go signal until the tool's output goes quiet for ``quiet_s`` (the time
    of its last byte before that pause), in a fresh 200x50 tmux pane: what a person waits for
    before the screen stops changing."""
    with tempfile.TemporaryDirectory(prefix="d2-bench-") as tmp:
        log = Path(tmp) / "pty.log"
        t0 = _start_in_tmux(argv, env, Path(tmp))
        size, last = 0, None
        while time.monotonic() - t0 < limit_s:
            now, grown = time.monotonic(), _size(log)
            if grown != size:
                size, last = grown, now
            elif last is not None and now - last >= quiet_s:
                break
            time.sleep(0.002)
        pid = _tmux("display-message", "-p", "-t", "b", "#{pane_pid}").strip()
        _tmux("kill-server")
        if pid.isdigit():
            _wait_gone(int(pid))
    if last is None:
        raise RuntimeError(f"{argv[0]} wrote nothing in {limit_s:.0f} s")
    return last - t0


def first_frames(rounds: int, args: argparse.Namespace, env: dict[str, str]) -> None:
    """Each tool's first frame ``rounds`` times, interleaved, beside htop (and glances) and a
    one-line Textual app (the floor): the medians and the ratio to htop's, in one run (no job:
    what a person sees on opening it)."""
    tools = tools_for(BASELINE_STATE, args) | {"textual": floor_tool()}
    times: dict[str, list[float]] = {tool: [] for tool in tools}
    with tempfile.TemporaryDirectory(prefix="d2-bench-ring-") as tmp:
        ring = os.path.join(tmp, "ring")
        os.mkdir(ring, 0o700)
        for _ in range(rounds):
            for tool, (argv, _ready) in tools.items():
                times[tool].append(first_frame_s(argv, {**env, "TRAINTOP_RING_DIR": ring}))
    htop = statistics.median(times["htop"]) if times.get("htop") else None
    print(f"\nfirst frame (until quiet 0.3 s, 200x50, median of {rounds}, interleaved):")
    for tool, values in times.items():
        median = statistics.median(values)
        ratio = f"  {median / htop:.2f}x htop" if htop else ""
        runs = ", ".join(f"{v:.3f}" for v in values)
        print(f"  {tool:<9} {median:.3f} s{ratio}  ({runs})")
    mine, floor = statistics.median(times["traintop"]), statistics.median(times["textual"])
    print(f"first frame: {mine:.3f} s (<= 0.30) {'met' if mine <= 0.3 else 'NOT met'}"
          + ("" if htop is None else f"; {mine / htop:.2f}x htop (<= 3) "
             f"{'met' if mine <= 3 * htop else 'NOT met'}"))  # fmt: skip
    print(f"a one-line Textual app: {floor:.3f} s, {mine / floor:.2f}x of it is traintop's "
          f"first frame; the 0.30 s target is {0.3 / floor:.2f}x that floor")  # fmt: skip


GPU_BOX = """# One H100; its one compute process is the benchmark's training rank
devices 1
0 preset h100
0 set util.gpu 92
0 set mem.used 47185920000
0 set power 540000
0 wave util.gpu 6 5
0 wave power 40000 8
0 proc {pid} 47185920000 C
"""


def gpu_box(rounds: int, seconds: float, interval: float, nvitop: str,
            tree: str | None = None, before: str | None = None) -> None:  # fmt: skip
    """traintop beside nvitop on a one-GPU box with one job on the card, at the same interval:
    CPU, peak RSS, first frame and bytes to the terminal, interleaved ``rounds`` times; the
    ratios to nvitop's and the targets (CPU <= 1.0x, bytes/s <= 2x, RSS <= 60 MB).  ``tree``:
    traintop from another source tree (a before/after); ``before``: that too, as one more tool."""
    import psutil

    traintop = f"{sys.executable} -m traintop.cli.main --interval {interval:g}"
    if tree:
        traintop = f"env -C {tree} PYTHONPATH={tree} {traintop}"
    tools = {"traintop": (traintop.split(), "H100"),
             # stderr away: nvitop logs each NVML call the fake lacks over its screen, once
             "nvitop": ([nvitop, "-m", "full", "--interval", f"{interval:g}", "2>/dev/null"],
                        "H100")}  # fmt: skip
    if before:
        tools["before"] = ([*from_tree(before).split(), "--interval", f"{interval:g}"], "H100")
    runs: dict[str, list[dict]] = {tool: [] for tool in tools}
    with tempfile.TemporaryDirectory(prefix="d2-bench-ring-") as tmp:
        ring = os.path.join(tmp, "ring")
        os.mkdir(ring, 0o700)
        (launcher,) = start_jobs(ring, 1, 1, 20.0, rounds * len(tools) * (seconds + 30) + 60)
        try:
            wait_for_segments(ring, 1)
            (rank,) = psutil.Process(launcher.pid).children()
            scenario = Path(tmp) / "gpu_box.txt"
            scenario.write_text(GPU_BOX.format(pid=rank.pid))
            env = {**fake_nvml_env(), "FAKE_NVML_SCENARIO": str(scenario),
                   "TRAINTOP_RING_DIR": ring}  # fmt: skip
            for _ in range(rounds):
                for tool, (argv, ready) in tools.items():
                    runs[tool].append(run_in_tmux(argv, ready, seconds, env))
        finally:
            leave_state([launcher])
    for tool, results in runs.items():  # peak RSS grows with the age of the job attached to
        per_run = "; ".join(f"{r['cpu_pct']:.2f} % {r['peak_rss_mb']:.1f} MB {r['kib_per_s']:.2f}"
                            for r in results)  # fmt: skip
        print(f"{tool} per run (CPU, peak RSS, KiB/s): {per_run}")
    rows = {("one GPU job", tool): _median_run(results) for tool, results in runs.items()}
    print_table(rows)
    mine, peer = rows[("one GPU job", "traintop")], rows[("one GPU job", "nvitop")]
    for key, limit, name in (("cpu_pct", 1.0, "CPU"), ("kib_per_s", 2.0, "bytes/s")):
        ratio = mine[key] / peer[key] if peer[key] else float("inf")
        print(f"{name}: traintop {mine[key]:.2f}, nvitop {peer[key]:.2f}: {ratio:.2f}x "
              f"(<= {limit:g}x) {'met' if ratio <= limit else 'NOT met'}")  # fmt: skip
    rss = mine["peak_rss_mb"]
    print(f"peak RSS: traintop {rss:.1f} MB (<= 60) {'met' if rss <= 60 else 'NOT met'}, "
          f"nvitop {peer['peak_rss_mb']:.1f} MB")  # fmt: skip
    print("\n".join(rise_lines(rows)))
    print(f"interval {interval:g} s both; steady window {seconds:.0f} s x {rounds}; 200x50; "
          "1 fake H100, its process a live rank")  # fmt: skip


def _median_run(results: list[dict]) -> dict:
    """Per figure, the median over the runs of one tool."""
    return {key: statistics.median(r[key] for r in results) for key in results[0]}


STATES = ("no job", "one 8-rank job", "8 jobs x 8 ranks", "24 finished")
BASELINE_STATE = "one 8-rank job"


def enter_state(state: str, ring: str, seconds: float) -> list[subprocess.Popen]:
    """Start (or leave behind) the writers of ``state`` in ``ring``; returns what to stop."""
    if state == "24 finished":
        finished_sweep(ring, 24)
        time.sleep(ENDED_COLLAPSE_S + 5)  # "ended minutes ago": folded into the summary row
        return []
    jobs = {"no job": 0, "one 8-rank job": 1, "8 jobs x 8 ranks": 8}[state]
    procs = start_jobs(ring, jobs, 8, 20.0, seconds)
    wait_for_segments(ring, 8 * jobs)
    return procs


def leave_state(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()


def from_tree(tree: str) -> str:
    """traintop from another source tree (an older commit, `git archive`d)."""
    return f"env -C {tree} PYTHONPATH={tree} {sys.executable} -m traintop.cli.main"


def tools_for(state: str, args: argparse.Namespace) -> dict[str, tuple[list[str], str]]:
    traintop = shutil.which("traintop") or f"{sys.executable} -m traintop.cli.main"
    if args.tree:  # a before/after
        traintop = from_tree(args.tree)
    tools = {"traintop": ([traintop, "--interval", "1"], "H100")}
    if args.before:
        tools["before"] = ([from_tree(args.before), "--interval", "1"], "H100")
    if args.skip_baselines or state != BASELINE_STATE:
        return tools
    if shutil.which("htop"):
        tools["htop"] = (["htop", "-d", "10"], "Load average")
    if args.glances:
        tools["glances"] = ([args.glances, "-t", "1"], "CPU")
    return tools


def floor_tool() -> tuple[list[str], str]:
    """A one-line Textual app (benchmarks/textual_floor.py): what the UI library alone costs
    to a first frame here, the floor under any Textual monitor's."""
    return [sys.executable, str(Path(__file__).with_name("textual_floor.py"))], "floor"


_WITHOUT = {
    "htop": "htop not found on PATH (apt-get install htop): no htop row",
    "glances": "glances not found (pip install glances, or --glances PATH): no glances row, "
    "and 'one 8-rank job <= glances' is not checked",
}


def missing_baselines(args: argparse.Namespace) -> list[str]:
    """A line for each baseline ``tools_for`` will leave out, said before the run starts (a
    fresh VM often has neither): the table would otherwise just lack the row, and the target
    the check."""
    present = tools_for(BASELINE_STATE, args)
    return [line for tool, line in _WITHOUT.items() if tool not in present]


def run_state(state: str, args: argparse.Namespace, env: dict[str, str]) -> dict[str, dict]:
    """Every tool once in ``state``, each with a fresh ring directory in that state."""
    results = {}
    for tool, (argv, ready) in tools_for(state, args).items():
        with tempfile.TemporaryDirectory(prefix="d2-bench-ring-") as tmp:
            ring = os.path.join(tmp, "ring")
            os.mkdir(ring, 0o700)
            procs = enter_state(state, ring, args.seconds + 60)
            try:
                results[tool] = run_in_tmux(argv, ready, args.seconds,
                                            {**env, "TRAINTOP_RING_DIR": ring})  # fmt: skip
            finally:
                leave_state(procs)
    return results


def print_table(rows: dict[tuple[str, str], dict]) -> None:
    print(f"\n{'state':<18} {'tool':<9} {'CPU %':>6} {'peak RSS MB':>11} {'first frame s':>13} "
          f"{'first KiB':>9} {'KiB/s':>6}")  # fmt: skip
    for (state, tool), r in rows.items():
        cost = f"{r['cpu_pct']:>6.2f} {r['peak_rss_mb']:>11.1f} {r['first_frame_s']:>13.3f}"
        print(f"{state:<18} {tool:<9} {cost} {r['first_kib']:>9.1f} {r['kib_per_s']:>6.2f}")


def check_targets(rows: dict[tuple[str, str], dict]) -> list[str]:
    """One line per target: the figure, the limit, met or not."""
    mine = {state: r for (state, tool), r in rows.items() if tool == "traintop"}
    lines = []

    def check(name: str, value: float | None, limit: float | None) -> None:
        if value is not None and limit is not None:
            lines.append(
                f"{name}: {value:.2f} (<= {limit:.2f}) {'met' if value <= limit else 'NOT met'}"
            )

    one = mine.get(BASELINE_STATE)
    glances = rows.get((BASELINE_STATE, "glances"))
    if one:
        check("CPU %, one 8-rank job", one["cpu_pct"], 1.5)
        check("CPU %, one 8-rank job vs glances", one["cpu_pct"], glances and glances["cpu_pct"])
        if glances is None:
            lines.append("CPU %, one 8-rank job vs glances: not checked (glances did not run)")
        check("first frame KiB", one["first_kib"], 60)
        check("KiB/s after the first frame", one["kib_per_s"], 4)
    if "8 jobs x 8 ranks" in mine:
        check("CPU %, 64 live ranks", mine["8 jobs x 8 ranks"]["cpu_pct"], 2.0)
    if "24 finished" in mine and "no job" in mine:
        added = mine["24 finished"]["cpu_pct"] - mine["no job"]["cpu_pct"]
        check("points added by 24 finished segments", added, 0.1)
    for state, r in mine.items():
        check(f"peak RSS MB, {state}", r["peak_rss_mb"], 80)
    return lines + rise_lines(rows)


RISE_MAX = 0.1  # points of a core a change may add to the monitor (issue 43)


def rise_lines(rows: dict[tuple[str, str], dict]) -> list[str]:
    """This tree's CPU less the ``before`` tree's, per state (where both ran)."""
    lines = []
    for (state, tool), r in rows.items():
        old = rows.get((state, "before"))
        if tool == "traintop" and old is not None:
            rise = r["cpu_pct"] - old["cpu_pct"]
            lines.append(f"CPU points this tree adds, {state}: {rise:+.2f} (<= {RISE_MAX:g}) "
                         f"{'met' if rise <= RISE_MAX else 'NOT met'}")  # fmt: skip
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--skip-baselines", action="store_true")
    parser.add_argument("--states", default=",".join(STATES))
    parser.add_argument("--glances", default=shutil.which("glances"))
    parser.add_argument("--tree", default=None, help="run traintop from this source tree")
    parser.add_argument("--before", default=None, help="and traintop from this one, beside it")
    parser.add_argument(
        "--first-frames",
        type=int,
        metavar="N",
        help="only the first frame, N times each beside htop (and glances)",
    )
    parser.add_argument(
        "--gpu-box",
        metavar="NVITOP",
        help="only traintop beside this nvitop, one GPU and one job on it",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=2.0,
        help="--gpu-box: both tools' interval (nvitop's default: 2 s)",
    )
    args = parser.parse_args()
    compile_tree(Path(args.tree) if args.tree else ROOT)
    if args.before:
        compile_tree(Path(args.before))
    if args.gpu_box:
        print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        gpu_box(args.repeat, args.seconds, args.interval, args.gpu_box, args.tree, args.before)
        print("load average after:  {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        return 0
    if args.first_frames:
        print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        first_frames(args.first_frames, args, fake_nvml_env())
        print("load average after:  {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        return 0
    states = [s.strip() for s in args.states.split(",") if s.strip()]
    unknown = [s for s in states if s not in STATES]
    if unknown:
        parser.error(f"unknown state {unknown[0]!r}; choose from: {', '.join(STATES)}")
    baselines = not args.skip_baselines and BASELINE_STATE in states
    if baselines and args.glances and not shutil.which(args.glances):
        parser.error(f"--glances {args.glances}: no such executable")
    if baselines:
        print("\n".join(missing_baselines(args)) or "baselines: htop and glances")
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    full_us, gpu_us = sample_cost_us()
    print(f"one full sample (8 fake GPUs + host): {full_us:7.0f} µs; GPU collector {gpu_us:.0f} µs")
    env = fake_nvml_env()
    runs: dict[tuple[str, str], list[dict]] = {}
    for _ in range(args.repeat):  # interleaved, so a noisy minute hits every state alike
        for state in states:
            for tool, result in run_state(state, args, env).items():
                runs.setdefault((state, tool), []).append(result)
    if args.repeat > 1:
        for (state, tool), results in runs.items():
            cpu = ", ".join(f"{r['cpu_pct']:.2f}" for r in results)
            print(f"{state} / {tool} per run: CPU % {cpu}")
    rows = {key: _median_run(results) for key, results in runs.items()}
    print_table(rows)
    print()
    print("\n".join(check_targets(rows)))
    print(f"interval 1 s; steady window {args.seconds:.0f} s x {args.repeat}; terminal 200x50")
    print("load average after:  {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
