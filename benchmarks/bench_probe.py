"""What the probe costs the training loop.  Prints figures; asserts nothing.

``python benchmarks/bench_probe.py [--pairs N]``

1. Micro: ns per ``probe.step()`` record and per full step (data wait through ``probe.loader``,
   four ``probe.phase`` blocks, ``step()``: five phase marks) against a bare
   ``time.perf_counter_ns()`` pair and ``torch.profiler.record_function``.
2. Macro: a real CPU training loop (steps of several ms) plain vs under ``traintop run``,
   runs interleaved, medians of the in-loop wall time (interpreter start-up excluded).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from traintop.probe import Probe  # noqa: E402
from traintop.ring import RingWriter  # noqa: E402

LOOP_STEPS = 300


def per_call_ns(body: Callable[[int], None], n: int = 20_000, repeats: int = 15) -> float:
    """Median over ``repeats`` batches of the mean ns per call of ``body(n)``."""
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        body(n)
        samples.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(samples)


def make_probe(directory: str) -> Probe:
    def factory(phases):
        return RingWriter.create(name="bench", phases=phases, directory=directory, capacity=4096)

    return Probe("bench", writer_factory=factory)


def bench_micro(directory: str) -> dict[str, float]:
    probe = make_probe(directory)
    probe.step()  # create the segment outside the timed region

    def records(n: int) -> None:
        for _ in range(n):
            probe.step()

    def full_steps(n: int) -> None:
        forward, backward = probe.phase("forward"), probe.phase("backward")
        optimizer, logging = probe.phase("optimizer"), probe.phase("other")
        for _batch in probe.loader(range(n)):
            with forward:
                pass
            with backward:
                pass
            with optimizer:
                pass
            with logging:
                pass
            probe.step()

    def timer_pairs(n: int) -> None:
        clock = time.perf_counter_ns
        for _ in range(n):
            clock()
            clock()

    results = {
        "probe.step() record": per_call_ns(records),
        "full step, 5 phase marks": per_call_ns(full_steps),
        "perf_counter_ns() pair": per_call_ns(timer_pairs),
    }
    results["torch record_function"] = bench_record_function()
    probe.close()
    return results


def bench_record_function() -> float:
    import torch.profiler

    def uses(n: int) -> None:
        for _ in range(n):
            with torch.profiler.record_function("step"):
                pass

    return per_call_ns(uses, n=5_000)


def training_loop() -> None:
    """The macro workload: an unmodified CPU loop; prints its own wall time in seconds."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(LOOP_STEPS * 64, 256)
    data = torch.utils.data.TensorDataset(x, x[:, :1])
    loader = torch.utils.data.DataLoader(data, batch_size=64)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1))  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    t0 = time.perf_counter()
    for xb, yb in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
    print(time.perf_counter() - t0)


def bench_macro(pairs: int, directory: str) -> tuple[float, float]:
    env = {**os.environ, "TRAINTOP_RING_DIR": directory, "PYTHONPATH": str(REPO)}
    loop = [sys.executable, __file__, "--loop"]
    launcher = [sys.executable, "-m", "traintop.launcher", "--", *loop]
    plain, shimmed = [], []
    for _ in range(pairs):
        for command, times in ((loop, plain), (launcher, shimmed)):
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            times.append(float(out.stdout.split()[-1]))
    return statistics.median(plain), statistics.median(shimmed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=7, help="interleaved macro runs")
    parser.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:
        training_loop()
        return
    with tempfile.TemporaryDirectory() as directory:
        micro = bench_micro(directory)
        base = micro["perf_counter_ns() pair"]
        for name, ns in micro.items():
            print(f"{name:28s} {ns:8.0f} ns   {ns / base:5.1f}x timer pair")
        ratio = micro["full step, 5 phase marks"] / micro["torch record_function"]
        print(f"full probe step = {ratio:.2f}x one record_function use")
        plain, shimmed = bench_macro(args.pairs, directory)
    step_ms = plain / LOOP_STEPS * 1e3
    print(f"training loop ({LOOP_STEPS} steps, {step_ms:.1f} ms/step), median of {args.pairs}:")
    print(f"  plain {plain:.3f} s   traintop run {shimmed:.3f} s   "
          f"slowdown {100 * (shimmed / plain - 1):+.2f} %")  # fmt: skip


if __name__ == "__main__":
    main()
