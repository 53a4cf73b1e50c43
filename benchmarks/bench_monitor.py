"""Benchmark the monitor itself: sample cost, steady CPU and RSS, and time to first frame.

Figures and ratios come from one run on this machine, side by side with baselines measured
the same way (htop and glances in the same tmux geometry), because absolute numbers on a
noisy 2-core VM mean little.  Usage::

    python benchmarks/bench_monitor.py [--seconds 60] [--repeat 3] [--skip-baselines]

``--repeat`` runs every tool that many times and reports the median (and each run): on a shared
2-core VM one 60 s window varies by about 0.2 points of CPU between otherwise equal runs.

Targets (issue 2): <= 1.5 % of one core at a 1 s interval, <= 70 MB peak RSS, first full
frame <= 0.5 s, with 8 fake H100s throttling through the C-ABI fake NVML.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakenvml.build import build_fake_nvml  # noqa: E402

SCENARIO = ROOT / "tests" / "fakenvml" / "scenarios" / "h100x8_throttle.txt"
CLK_TCK = os.sysconf("SC_CLK_TCK")


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
        "from collectors.factory import build_collectors\n"
        "from collectors.sampler import Sampler\n"
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


def _tmux(*args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["tmux", "-L", "ttbench", *args], capture_output=True, text=True, env=env, check=False
    ).stdout


def _wait_gone(pid: int, timeout_s: float = 10.0) -> None:
    """Wait until ``pid`` has exited and the machine has settled, so that one tool's shutdown
    never lands in the next tool's first-frame or CPU window."""
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(2.0)


def run_in_tmux(argv: list[str], ready: str, seconds: float, env: dict[str, str]) -> dict:
    """Start argv in a 200x50 tmux pane, time its first frame, then its CPU over `seconds`."""
    _tmux("kill-server")
    full_env = {**os.environ, **env, "TERM": "xterm-256color"}
    cmd = " ".join(argv)
    t0 = time.monotonic()
    _tmux("new-session", "-d", "-s", "b", "-x", "200", "-y", "50", f"exec {cmd}", env=full_env)
    while ready not in _tmux("capture-pane", "-p", "-t", "b"):
        if time.monotonic() - t0 > 30:
            raise RuntimeError(f"{argv[0]} never showed {ready!r}")
        time.sleep(0.005)
    first_frame_s = time.monotonic() - t0
    pid = int(_tmux("display-message", "-p", "-t", "b", "#{pane_pid}").strip())
    time.sleep(2.0)  # let start-up work finish before the steady-state window
    cpu0, w0 = _proc_cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    cpu1, w1 = _proc_cpu_s(pid), time.monotonic()
    rss = _peak_rss_mb(pid)
    _tmux("kill-server")
    _wait_gone(pid)
    return {
        "first_frame_s": first_frame_s,
        "cpu_pct": 100 * (cpu1 - cpu0) / (w1 - w0),
        "peak_rss_mb": rss,
    }


def _median_run(results: list[dict]) -> dict:
    """Per figure, the median over the runs of one tool."""
    return {key: statistics.median(r[key] for r in results) for key in results[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--skip-baselines", action="store_true")
    args = parser.parse_args()
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    full_us, gpu_us = sample_cost_us()
    cold_us, cold_gpu_us = sample_cost_us(rounds=15, gap_s=1.0)
    print(f"one full sample (8 fake GPUs + host):{full_us:7.0f} µs warm {cold_us:7.0f} µs cold")
    print(f"  of which GPU collector:             {gpu_us:7.0f} µs warm {cold_gpu_us:7.0f} µs cold")
    env = fake_nvml_env()
    traintop = shutil.which("traintop") or f"{sys.executable} -m tui.cli"
    tools = {"traintop": ([traintop, "--interval", "1"], "H100")}
    if not args.skip_baselines:
        if shutil.which("htop"):
            tools["htop"] = (["htop", "-d", "10"], "Load average")
        if shutil.which("glances"):
            tools["glances"] = (["glances", "-t", "1"], "CPU")
    runs: dict[str, list[dict]] = {tool: [] for tool in tools}
    for _ in range(args.repeat):  # interleaved, so a noisy minute hits every tool alike
        for tool, (argv, ready) in tools.items():
            runs[tool].append(run_in_tmux(argv, ready, args.seconds, env))
    rows = {tool: _median_run(results) for tool, results in runs.items()}
    if args.repeat > 1:
        for tool, results in runs.items():
            cpu = ", ".join(f"{r['cpu_pct']:.2f}" for r in results)
            first = ", ".join(f"{r['first_frame_s']:.3f}" for r in results)
            print(f"{tool} per run: CPU % {cpu}; first frame s {first}")
    print(f"\n{'tool':<10} {'CPU % of one core':>18} {'peak RSS MB':>12} {'first frame s':>14}")
    for tool, r in rows.items():
        print(
            f"{tool:<10} {r['cpu_pct']:>18.2f} {r['peak_rss_mb']:>12.1f} "
            f"{r['first_frame_s']:>14.3f}"
        )
    base = rows["traintop"]
    for tool, r in rows.items():
        if tool != "traintop" and r["cpu_pct"] > 0:
            print(f"traintop/{tool} CPU ratio: {base['cpu_pct'] / r['cpu_pct']:.2f}")
    ok = base["cpu_pct"] <= 1.5 and base["peak_rss_mb"] <= 70 and base["first_frame_s"] <= 0.5
    print(f"\ntargets (<=1.5 % CPU, <=70 MB, <=0.5 s first frame): {'met' if ok else 'NOT met'}")
    print(f"interval 1 s; steady window {args.seconds:.0f} s x {args.repeat}; terminal 200x50")
    print("load average after:  {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
