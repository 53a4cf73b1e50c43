"""Benchmark `traintop exporter`: CPU per core, RSS and scrape latency at Prometheus's pace.

The target (issue 12): <= 0.5 % of one core at a 15 s scrape interval with 8 GPUs and an
8-rank job.  Set-up: 8 fake H100s (one throttling) through the C-ABI fake NVML, 8 real probe
processes of one job (``traintop.attach``, 20 steps/s each, five phases), an OpenMetrics scrape
every 15 s.  Each exporter runs alone for ``--seconds`` after a warm-up; its CPU is read from
/proc (user + system, all threads).  Baselines from the same run: the exporter sampling at the
monitor's 1 s, and Debian's node-exporter scraped the same way (what every cluster already
pays for host metrics).  Usage::

    python benchmarks/bench_exporter.py [--seconds 120] [--scrape-every 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_monitor import fake_nvml_env  # noqa: E402

TRAINTOP = str(Path(sys.executable).with_name("traintop"))
CLK_TCK = os.sysconf("SC_CLK_TCK")
WARMUP_S = 8.0
RANK = """
import time, traintop
probe = traintop.attach(name="bench-job")
while True:
    for phase in ("forward", "backward", "allreduce", "optimizer"):
        probe.mark(phase)
        time.sleep(0.0125)
    probe.step(samples=32)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_ranks(ring_dir: str, world: int = 8) -> list[subprocess.Popen]:
    """``world`` real probe processes of one job, as torchrun would start them."""
    base = {**os.environ, "TRAINTOP_RING_DIR": ring_dir, "WORLD_SIZE": str(world),
            "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}  # fmt: skip
    return [
        subprocess.Popen(
            [sys.executable, "-c", RANK],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
        )
        for r in range(world)
    ]


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of the process, all threads (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def scrape(url: str) -> tuple[float, int]:
    """One scrape as Prometheus sends it: (seconds, bytes)."""
    headers = {
        "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    }
    start = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
        size = len(r.read())
    return time.perf_counter() - start, size


def wait_up(url: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            scrape(url)
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"no answer from {url}")


def measure(argv: list[str], url: str, env: dict, seconds: float, every: float) -> dict:
    """CPU % of one core, peak RSS and scrape latency of one exporter under a steady scrape."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_up(url)
        time.sleep(WARMUP_S)
        latencies, sizes = [], []
        cpu0, t0 = cpu_s(proc.pid), time.monotonic()
        while time.monotonic() - t0 < seconds:
            took, size = scrape(url)
            latencies.append(took)
            sizes.append(size)
            time.sleep(max(0.0, every - took))
        cpu = cpu_s(proc.pid) - cpu0
        wall = time.monotonic() - t0
        return {"cpu_pct": 100 * cpu / wall, "rss_mb": rss_mb(proc.pid),
                "scrape_ms": 1e3 * sorted(latencies)[len(latencies) // 2],
                "bytes": sizes[-1], "scrapes": len(latencies)}  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--seconds", type=float, default=120.0)
    args.add_argument("--scrape-every", type=float, default=15.0)
    opts = args.parse_args()
    ring_dir = tempfile.mkdtemp(prefix="traintop-bench-ring-")
    env = {**os.environ, **fake_nvml_env(), "TRAINTOP_RING_DIR": ring_dir}
    ranks = start_ranks(ring_dir)
    rows = []
    try:
        time.sleep(3)
        for label, interval in (("traintop exporter (default 5 s sampling)", "5"),
                                ("traintop exporter --interval 1", "1")):  # fmt: skip
            port = free_port()
            argv = [TRAINTOP, "exporter", "--listen", f"127.0.0.1:{port}", "--interval", interval]
            url = f"http://127.0.0.1:{port}/metrics"
            rows.append((label, measure(argv, url, env, opts.seconds, opts.scrape_every)))
        node_exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
        if node_exporter:
            port = free_port()
            argv = [node_exporter, f"--web.listen-address=127.0.0.1:{port}"]
            url = f"http://127.0.0.1:{port}/metrics"
            rows.append(
                (
                    "node-exporter (baseline)",
                    measure(argv, url, env, opts.seconds, opts.scrape_every),
                )
            )
    finally:
        for proc in ranks:
            proc.terminate()
        for proc in ranks:
            proc.wait(10)
        shutil.rmtree(ring_dir, ignore_errors=True)
    report(rows, opts)


def report(rows: list[tuple[str, dict]], opts: argparse.Namespace) -> None:
    print(f"\n8 fake H100s, one 8-rank job at 20 steps/s per rank; an OpenMetrics scrape every "
          f"{opts.scrape_every:g} s for {opts.seconds:g} s per tool; load average "
          f"{os.getloadavg()[0]:.2f}\n")  # fmt: skip
    print("| tool | CPU % of one core | peak RSS | scrape p50 | body | scrapes |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, m in rows:
        print(f"| {label} | {m['cpu_pct']:.3f} | {m['rss_mb']:.1f} MB | {m['scrape_ms']:.1f} ms "
              f"| {m['bytes'] / 1024:.1f} KiB | {m['scrapes']} |")  # fmt: skip
    base = rows[0][1]["cpu_pct"]
    for label, m in rows[1:]:
        print(f"{rows[0][0]} costs {base / m['cpu_pct']:.2f}x the CPU of {label}")
    print(f"target <= 0.5 % of one core: {'met' if base <= 0.5 else 'NOT met'} ({base:.3f} %)")


if __name__ == "__main__":
    main()
