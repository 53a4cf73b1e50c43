"""What the stack helper thread costs a healthy rank, and how fast it answers.  Prints
figures; asserts nothing.

``python benchmarks/bench_stack_helper.py [--seconds S]``

A training loop in a process of its own (``traintop.attach()``, a step every 10 ms, no torch)
runs for S seconds (60) with its helper thread waiting on its FIFO, as every rank does while
it steps.  The helper thread's CPU time comes from the kernel (``/proc/PID/task/TID/
schedstat``, ns on a CPU), beside the loop's own thread for scale: the issue's target is 0.1 %
of a core at most.  Then, the loop still running, the round trip of 20 stack requests (ask,
answer read back, as the monitor does) and one request for 20 samples 50 ms apart.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from traintop.collectors.ring_reader import open_segment  # noqa: E402
from traintop.collectors.stacks import StackClient, wait_for  # noqa: E402

LOOP = textwrap.dedent(
    """
    import sys, time, traintop
    probe = traintop.attach(name="bench")
    probe.step()
    print(probe._writer.path, flush=True)
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        probe.mark("forward")
        time.sleep(0.01)
        probe.step()
    """
)


def on_cpu_ns(pid: int, tid: int) -> int:
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        return int(f.read().split()[0])


def helper_tid(path: Path) -> int:
    """The helper thread's id, as the rank publishes it in its segment for the monitor."""
    with open_segment(path) as segment:
        tid = segment.hot().helper_tid
    if not tid:
        raise SystemExit("no helper thread found")
    return tid


def round_trips(path: Path, count: int) -> list[float]:
    with open_segment(path) as segment:
        client = StackClient(path, segment.header)
        times = []
        for _ in range(count):
            t0 = time.monotonic()
            client.ask(t0)
            while client.waiting:
                time.sleep(0.0005)
                client.poll(time.monotonic(), segment.hot())
            times.append(time.monotonic() - t0)
        client.ask_samples(time.monotonic(), None, 20, 50)
        t0 = time.monotonic()
        while client.samples is None and time.monotonic() - t0 < 5:
            time.sleep(0.01)
            client.poll(time.monotonic(), None)
        sampled = time.monotonic() - t0
        wait_for(client, segment.hot)
    return [*times, sampled]


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args.add_argument("--seconds", type=float, default=60.0)
    opts = args.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        env = {**os.environ, "PYTHONPATH": str(REPO), "TRAINTOP_RING_DIR": tmp}
        total = opts.seconds + 10
        proc = subprocess.Popen([sys.executable, "-c", LOOP, str(total)], env=env,
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        path = Path(proc.stdout.readline().strip())
        time.sleep(0.5)
        tid = helper_tid(path)
        t0, h0, m0 = time.monotonic(), on_cpu_ns(proc.pid, tid), on_cpu_ns(proc.pid, proc.pid)
        time.sleep(opts.seconds)
        wall = time.monotonic() - t0
        helper = on_cpu_ns(proc.pid, tid) - h0
        loop = on_cpu_ns(proc.pid, proc.pid) - m0
        trips = round_trips(path, 20)
        proc.wait()
    print(f"load average {os.getloadavg()[0]:.2f}; {wall:.0f} s of a loop stepping every 10 ms")
    print(f"helper thread on a CPU {helper / 1e6:.3f} ms: {helper / 1e9 / wall * 100:.4f} % of a "
          f"core (the loop's thread: {loop / 1e9 / wall * 100:.1f} %)")  # fmt: skip
    stacks, sampled = trips[:-1], trips[-1]
    median, worst = statistics.median(stacks) * 1e3, max(stacks) * 1e3
    print(f"stack request answered in {median:.1f} ms median (max {worst:.1f} ms); "
          f"20 samples 50 ms apart in {sampled:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
