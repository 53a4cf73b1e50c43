"""What the probe costs the training loop.  Prints figures; asserts nothing.

``python benchmarks/bench_probe.py [--pairs N] [--baseline REV]``

1. Micro: ns per ``probe.step()`` record and per full step (data wait through ``probe.loader``,
   then either four ``probe.phase`` blocks or three ``probe.mark`` calls, then ``step()``: five
   phase boundaries) against a bare ``time.perf_counter_ns()`` pair and
   ``torch.profiler.record_function``, all in the same run.
2. Macro: a real CPU training loop (steps >= 5 ms) plain vs under ``traintop run``, pairs run
   in ABBA order; medians, the per-pair slowdown and its spread (interpreter start-up excluded).
3. With ``--baseline REV``: the probe micro figures of ``traintop/`` as committed at git
   revision REV against the working tree, each in fresh processes, alternating (ABAB), so a
   before/after comparison shares one run and one machine load.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
if os.environ.get("BENCH_TRAINTOP_FROM"):  # --baseline: an older traintop/ shadows the tree's
    sys.path.insert(0, os.environ["BENCH_TRAINTOP_FROM"])

from traintop.probe import Probe  # noqa: E402
from traintop.ring import RingWriter  # noqa: E402

LOOP_STEPS = 300


def per_call_ns(
    body: Callable[[int], None], n: int = 20_000, repeats: int = 15
) -> tuple[float, float]:
    """Median and best over ``repeats`` batches of the mean ns per call of ``body(n)``.

    The best batch is what the code costs; the median adds the shared machine's preemptions.
    """
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        body(n)
        samples.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(samples), min(samples)


def make_probe(directory: str) -> Probe:
    def factory(phases):
        return RingWriter.create(name="bench", phases=phases, directory=directory, capacity=4096)

    return Probe("bench", writer_factory=factory)


def bench_micro(directory: str, with_torch: bool = True) -> dict[str, tuple[float, float]]:
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

    def marked_steps(n: int) -> None:
        mark = probe.mark
        for _batch in probe.loader(range(n)):
            mark("forward")
            mark("backward")
            mark("optimizer")
            probe.step()

    def timer_pairs(n: int) -> None:
        clock = time.perf_counter_ns
        for _ in range(n):
            clock()
            clock()

    results = {
        "probe.step() record": per_call_ns(records),
        "full step, 5 marks (with)": per_call_ns(full_steps),
        "full step, 5 marks (mark)": per_call_ns(marked_steps),
        "perf_counter_ns() pair": per_call_ns(timer_pairs),
    }
    if with_torch:
        results["torch record_function"] = bench_record_function()
    probe.close()
    return results


def bench_record_function() -> tuple[float, float]:
    import torch.profiler

    def uses(n: int) -> None:
        for _ in range(n):
            with torch.profiler.record_function("step"):
                pass

    return per_call_ns(uses, n=5_000)


def training_loop() -> None:
    """The macro workload: an unmodified CPU loop; prints its wall and CPU seconds.

    CPU time is reported too because the machine is shared: preemption by other processes
    inflates wall time at random, while this process's own CPU time barely moves.
    """
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
    t0, c0 = time.perf_counter(), time.process_time()
    for xb, yb in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
    print(time.perf_counter() - t0, time.process_time() - c0)


def bench_hooks(directory: str, rounds: int = 9) -> None:
    """What ``traintop run``'s torch hooks add per step, in-process, on a tiny model.

    The hooks are taken out of torch and put back between epochs (``Hooks.off/on``: a real
    unpatch), plain and hooked in ABBA order, so both see the same process, caches and load.
    ``bench_budget.py`` splits the figure by hook; ``onoff.py`` is the same switch in blocks.
    """
    import torch

    from traintop import torch_hooks

    model, optimizer, loader = _tiny_job(torch)
    hooks = torch_hooks.install(make_probe(directory), torch)
    _epoch(torch, model, optimizer, loader)  # the model search ends, the segment exists
    timings: dict[bool, list[float]] = {False: [], True: []}
    for i in range(2 * rounds):
        on = bool(i % 2) ^ bool(i // 2 % 2)  # ABBA
        hooks.on() if on else hooks.off()
        t0 = time.process_time()
        steps = _epoch(torch, model, optimizer, loader)
        timings[on].append((time.process_time() - t0) / steps * 1e6)
    hooks.off()
    base, extra = statistics.median(timings[False]), statistics.median(timings[True])
    print(
        f"torch hooks, tiny model ({base:.0f} us/step CPU): +{extra - base:.1f} us per step"
        f" = {100 * (extra - base) / 5000:.3f} % of a 5 ms step"
    )


def _tiny_job(torch):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(4096, 8)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x[:, :1]), batch_size=8)
    model = torch.nn.Linear(8, 1)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3), loader


def _epoch(torch, model, optimizer, loader) -> int:
    steps = 0
    for xb, yb in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
        steps += 1
    return steps


Run = tuple[float, float]  # (wall s, CPU s) of the training loop


def bench_macro(pairs: int, directory: str) -> list[tuple[Run, Run]]:
    """(plain, shimmed) loop times per pair, run in ABBA order.

    Alternating which run goes first cancels drifts in machine load and warm-cache effects that
    a fixed plain-then-shimmed order would book as overhead.
    """
    env = {**os.environ, "TRAINTOP_RING_DIR": directory, "PYTHONPATH": str(REPO)}
    loop = [sys.executable, __file__, "--loop"]
    launcher = [sys.executable, "-m", "traintop.launcher", "--", *loop]
    results = []
    for pair in range(pairs):
        order = (loop, launcher) if pair % 2 == 0 else (launcher, loop)
        times = {}
        for command in order:
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            wall, cpu = out.stdout.split()[-2:]
            times[command is launcher] = (float(wall), float(cpu))
        results.append((times[False], times[True]))
    return results


def report_macro(results: list[tuple[Run, Run]]) -> None:
    plain_wall = statistics.median(p[0] for p, _ in results)
    print(f"training loop ({LOOP_STEPS} steps, {plain_wall / LOOP_STEPS * 1e3:.1f} ms/step), "
          f"{len(results)} ABBA pairs:")  # fmt: skip
    for kind, i in (("wall", 0), ("CPU", 1)):
        plain = statistics.median(p[i] for p, _ in results)
        shimmed = statistics.median(s[i] for _, s in results)
        ratios = sorted(100 * (s[i] / p[i] - 1) for p, s in results)
        print(f"  {kind:4s} plain {plain:.3f} s  traintop run {shimmed:.3f} s  per-pair slowdown "
              f"median {statistics.median(ratios):+.2f} %, range {ratios[0]:+.2f} .. "
              f"{ratios[-1]:+.2f} %")  # fmt: skip
    pairs = ", ".join(f"({p[0]:.2f}, {s[0]:.2f})" for p, s in results)
    print(f"  wall s per pair (plain, traintop run): {pairs}")


PROBE_FIGURES = ("probe.step() record", "full step, 5 marks (with)", "full step, 5 marks (mark)")


def bench_baseline(revision: str, rounds: int = 3) -> None:
    """Median ns of the probe figures at ``revision`` vs the working tree, rounds alternating."""
    runs: dict[str, list[dict]] = {revision: [], "working tree": []}
    with tempfile.TemporaryDirectory() as old:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, "traintop"],
                                 capture_output=True, check=True).stdout  # fmt: skip
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(old, filter="data")
        for _ in range(rounds):
            for label, shadow in ((revision, old), ("working tree", "")):
                env = {**os.environ, "BENCH_TRAINTOP_FROM": shadow}
                out = subprocess.run([sys.executable, __file__, "--micro-json"], env=env,
                                     capture_output=True, text=True, check=True).stdout  # fmt: skip
                runs[label].append(json.loads(out))
    print(f"before/after, {rounds} alternating rounds (median of per-round medians, ns):")
    for name in PROBE_FIGURES:
        before, after = (statistics.median(r[name][0] for r in runs[k]) for k in runs)
        print(f"  {name:28s} {revision} {before:6.0f}  working tree {after:6.0f}  "
              f"({100 * (after / before - 1):+.1f} %)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=6, help="ABBA-interleaved macro run pairs")
    parser.add_argument("--baseline", metavar="REV", help="also compare with traintop/ at REV")
    parser.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--micro-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:
        training_loop()
        return
    if args.micro_json:
        with tempfile.TemporaryDirectory() as directory:
            print(json.dumps(bench_micro(directory, with_torch=False)))
        return
    with tempfile.TemporaryDirectory() as directory:
        micro = bench_micro(directory)
        base = micro["perf_counter_ns() pair"][0]
        for name, (median, best) in micro.items():
            print(f"{name:28s} median {median:6.0f} ns  best {best:6.0f} ns  "
                  f"{median / base:5.1f}x timer pair")  # fmt: skip
        for kind in ("with", "mark"):
            ratio = micro[f"full step, 5 marks ({kind})"][0] / micro["torch record_function"][0]
            print(f"full probe step ({kind}) = {ratio:.2f}x one record_function use")
        bench_hooks(os.path.join(directory, "hooks"))
        macro_dir = os.path.join(directory, "macro")
        report_macro(bench_macro(args.pairs, macro_dir))
        # Imported here: the reader follows this tree's format, and --baseline runs an older
        # traintop/ through this file.
        from traintop.collectors.ring_reader import discover

        segments = discover(macro_dir)
        print(f"  segments written by the traintop runs: {len(segments)} (expected {args.pairs})")
    if args.baseline:
        bench_baseline(args.baseline)


if __name__ == "__main__":
    main()
