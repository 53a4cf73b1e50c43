"""What the probe's knowledge of the job costs: the sync hook, the forward sample, the sampled
step profile, the facts file and the helper's wake.  Prints figures; asserts nothing.

``python benchmarks/bench_facts.py [--device cpu|cuda] [--steps N] [--profiles K] [--json FILE]``

``--json`` also writes the figures (what ``benchmarks/gpu_check.py`` folds into its report).

Runs on CPU torch (here) and on a CUDA box (``--device cuda``, the default when CUDA exists):

* Sync hook, per sync.  On CUDA: ``x.item()`` on a CUDA scalar with torch's sync debug mode off,
  then with the hook installed (debug mode "warn": torch's C++ warning, Python's filter, our
  matcher, the ledger); the difference is the hook's cost per sync.  On CPU torch there is no
  CUDA sync: the same Python path is driven by a C-level ``warnings.warn`` of torch's text (what
  torch's C++ hands Python), without torch's own C++ formatting.  Also the wrapper around
  ``torch.cuda.synchronize()`` (around a no-op on CPU) and the helper's ``keep_first`` check.
* Per step with no sync: the hook adds no code to the step; the probe's only per-step addition
  is one comparison (``step >= _tick_at``), timed on its own.
* Forward sample (autocast inside forward): arming the one-shot hook, and a forward with it
  against one without; amortised over the steps between samples (every 30 s).
* Step profile: an ordinary step's median, then K profiled cycles (warm-up step + profiled step
  + the helper's summary): the extra time per cycle, per profiled step, and averaged over
  training at the default schedule (every 300 s, within 0.1 % of the training time).  The first
  cycle (profiler start-up) is shown apart.
* Facts file: one write of a typical document (five sync sites, two loaders, a profile), and
  the helper's whole wake; both every 2 s, off the training thread.
* Allocator retries (CUDA): ``memory_stats`` per device, every 2 s on the helper thread.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
import timeit
import warnings
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from traintop import facts_file, sync_hook  # noqa: E402
from traintop.facts_agent import FactsAgent  # noqa: E402
from traintop.job_knobs import KnobWatch  # noqa: E402
from traintop.module_samples import hook_privately  # noqa: E402
from traintop.step_profiler import ProfileConfig, StepProfiler  # noqa: E402

SYNC_TEXT = sync_hook.SYNC_TEXT + " (Triggered internally at c10/cuda/CUDAFunctions.cpp:186.)"


def per_call_us(fn, n: int, repeat: int = 5) -> float:
    """Best of ``repeat`` runs of ``n`` calls, µs a call."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t)
    return best / n * 1e6


def bench_sync_hook(device: str, n: int) -> dict:
    print("== sync hook")
    figures: dict = {}
    if device == "cuda":
        x = torch.ones((), device="cuda")
        plain = per_call_us(x.item, n)
        hook = sync_hook.install(torch)
        hooked = per_call_us(x.item, n)
        print(
            f"  x.item() on CUDA: {plain:.2f} µs without the hook, {hooked:.2f} µs with it: "
            f"{hooked - plain:+.2f} µs a sync"
        )
        wrapped, bare = torch.cuda.synchronize, torch.cuda.synchronize.__wrapped__
        sync = (per_call_us(wrapped, n // 10), per_call_us(bare, n // 10))
        print(f"  torch.cuda.synchronize(): {sync[1]:.2f} µs bare, {sync[0]:.2f} µs wrapped")
        figures = {"item_us": plain, "item_hooked_us": hooked, "per_sync_us": hooked - plain,
                   "synchronize_us": sync[1], "synchronize_wrapped_us": sync[0]}  # fmt: skip
    else:
        fake = _fake_cuda_torch()
        hook = sync_hook.install(fake)
        warn = functools.partial(warnings.warn, SYNC_TEXT, UserWarning, 1)
        per_sync = per_call_us(warn, n)
        print(
            f"  one sync's warning through Python's filter, our matcher and the ledger "
            f"(torch's C++ formatting not included): {per_sync:.2f} µs"
        )
        wrapped = fake.cuda.synchronize
        extra = per_call_us(wrapped, n) - per_call_us(wrapped.__wrapped__, n)
        print(f"  the wrapper around synchronize() (a no-op here): {extra:+.2f} µs a call")
        figures = {"per_sync_us": per_sync, "synchronize_wrapper_us": extra}
    keep = per_call_us(hook.keeper.keep_first, n)
    print(f"  keep_first (the helper, every 2 s): {keep:.3f} µs")
    tick = _tick_ns(n * 50)
    print(
        f"  per step with no sync: 0 (no code on the step); the probe's tick comparison: "
        f"{tick:.1f} ns a step"
    )
    return figures | {"keep_first_us": keep, "step_without_sync_ns": tick}


def _tick_ns(n: int) -> float:
    """``if step >= self._tick_at`` as ``Probe.step`` runs it (locals, an instance attribute),
    in a loop against the same loop without it; the best of seven."""

    class Probe:
        def __init__(self) -> None:
            self._tick_at = 1 << 62

    def with_tick(probe: Probe) -> None:
        for step in range(n):
            if step >= probe._tick_at:
                pass

    def without(_probe: Probe) -> None:
        for _step in range(n):
            pass

    def best(loop) -> float:
        return min(timeit.repeat(lambda: loop(Probe()), number=1, repeat=7))

    return (best(with_tick) - best(without)) / n * 1e9


def _fake_cuda_torch() -> SimpleNamespace:
    """A torch module whose cuda namespace the hook can wrap (CPU torch has no debug mode)."""
    state = {"mode": 0}
    cuda = SimpleNamespace(
        set_sync_debug_mode=lambda mode: state.update(mode=mode),
        get_sync_debug_mode=lambda: state["mode"],
        synchronize=lambda device=None: None,
        Event=type("Event", (), {"synchronize": lambda self: None}),
    )
    return SimpleNamespace(__file__=torch.__file__, cuda=cuda)


def model_on(device: str) -> torch.nn.Module:
    """A small model with many small kernels: the launch-bound case, the profiler's worst."""
    layers = [m for _ in range(8) for m in (torch.nn.Linear(256, 256), torch.nn.GELU())]
    return torch.nn.Sequential(*layers, torch.nn.Linear(256, 1)).to(device)


def bench_forward_sample(device: str, steps_per_s: float) -> dict:
    """On a one-layer model: the sample's cost does not grow with the model."""
    print("== forward sample (autocast inside forward)")
    model, x = torch.nn.Linear(8, 8).to(device), torch.randn(4, 8, device=device)
    hook_privately(model, lambda *args: None)  # the probe's own pre-hook, always there
    knobs = KnobWatch(torch, SimpleNamespace(_found=[model], searching=False))

    def sampled() -> None:
        knobs.arm_forward_sample()
        model(x)

    with torch.no_grad():
        extra = min(per_call_us(sampled, 2000) - per_call_us(lambda: model(x), 2000) for _ in "ab")
    per_step = extra / (30.0 * steps_per_s)
    print(
        f"  one sample (arm + hooked forward): {extra:+.1f} µs; every 30 s at "
        f"{steps_per_s:.0f} steps/s: {per_step * 1000:.2f} ns a step"
    )
    return {"sample_us": extra, "per_step_ns": per_step * 1000}


def train_step(model, optimizer, x, device: str) -> None:
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()


def bench_profile(device: str, steps: int, profiles: int) -> dict:
    print("== step profile")
    model = model_on(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(64, 256, device=device)
    for _ in range(20):
        train_step(model, optimizer, x, device)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        train_step(model, optimizer, x, device)
        times.append(time.perf_counter() - t)
    step_s = statistics.median(times)
    print(f"  ordinary step: {step_s * 1e3:.2f} ms (median of {steps})")
    config = ProfileConfig("cpu", every_s=300.0, first_s=60.0, share=0.001)
    profiler = StepProfiler(torch, config, cuda=device == "cuda")
    costs, seen = [], {}
    for k in range(profiles):
        costs.append(_one_profile(profiler, model, optimizer, x, device, step_s, k, seen))
    first, rest = costs[0], costs[1:] or costs
    cost = statistics.median(rest)
    print(f"  first cycle (profiler start-up): {first * 1e3:.1f} ms")
    print(
        f"  later cycles: {cost * 1e3:.2f} ms each (median of {len(rest)}): "
        f"{cost / step_s * 100:.0f} % of a step, spread over the warm-up and profiled steps "
        f"and the summary"
    )
    every = max(config.every_s, cost / config.share)
    first_hour = (first + cost * (3600 / every - 1)) / 3600
    print(
        f"  averaged over training: one cycle every {every:.0f} s = "
        f"{cost / every * 100:.4f} % (first cycle included over the first hour: "
        f"{first_hour * 100:.4f} %)"
    )
    return seen | {"step_ms": step_s * 1e3, "first_cycle_ms": first * 1e3,
                   "cycle_ms": cost * 1e3, "every_s": every, "share": cost / every,
                   "first_hour_share": first_hour}  # fmt: skip


def _one_profile(
    profiler, model, optimizer, x, device: str, step_s: float, k: int, seen: dict
) -> float:
    """One cycle over three boundaries; its extra time over two ordinary steps, summary in;
    the second cycle's profiled step into ``seen``."""
    profiler.want(step_s)
    t = time.perf_counter()
    profiler.at_boundary(3 * k)
    train_step(model, optimizer, x, device)
    profiler.at_boundary(3 * k + 1)
    train_step(model, optimizer, x, device)
    profiler.at_boundary(3 * k + 2)
    training = time.perf_counter() - t
    t = time.perf_counter()
    entry, split = profiler.collect(now_s=1000.0 + k, start_s=0.0)
    summary = time.perf_counter() - t
    if k == 1:
        seen.update(profiled_step_ms=entry["step_s"] * 1e3, kernels=entry["kernels"],
                    joined=split.joined, kernel_share=entry["kernel_share"],
                    host_wait_share=entry["host_wait_share"], summary_ms=summary * 1e3)  # fmt: skip
        print(
            f"  profiled step: {entry['step_s'] * 1e3:.2f} ms, kernels {entry['kernels']} "
            f"({split.joined} of them joined to their launch call), busy "
            f"{entry['kernel_share']:.0%}, host_wait {entry['host_wait_share']:.0%}, sync "
            f"{entry['sync_share']:.0%}, launch p50 {entry['launch_us_p50']} µs; summary "
            f"{summary * 1e3:.1f} ms"
        )
    return training - 2 * step_s + summary


def bench_facts_file(device: str) -> dict:
    print("== facts file and the helper's wake")
    site = {
        "file": "/home/me/train.py",
        "line": 120,
        "function": "train",
        "kind": "item",
        "count": 123456,
        "code": "loss_value = loss.item()",
    }
    loader = {
        "num_workers": 8,
        "pin_memory": True,
        "persistent_workers": True,
        "prefetch_factor": 2,
        "batch_size": 64,
    }
    facts = {
        "device": device,
        "autocast": "bf16",
        "compiled": False,
        "loaders": [loader] * 2,
        "optimizers": [{"name": "AdamW", "fused": True, "foreach": None}],
    }
    profile = {k: 0.2 for k in ("kernel_share", "host_wait_share", "sync_share", "other_share")}
    doc = facts_file.document(time.monotonic_ns(), 10**6, facts, [site] * 5, 0, profile)
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        path = Path(tmp) / "1-r0-00000000.facts"
        write = per_call_us(lambda: facts_file.write(path, doc), 200)
    print(
        f"  one write ({len(str(doc))} bytes): {write:.0f} µs; one every 2 s: "
        f"{write / 2e6 * 100:.4f} % of a core, off the training thread"
    )
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        wake = _wake_us(tmp)
    print(f"  the helper's wake that finds nothing new (facts gathered, compared): {wake:.0f} µs")
    figures = {"write_us": write, "wake_us": wake}
    if device == "cuda":
        count = torch.cuda.device_count()
        read = per_call_us(lambda: [torch.cuda.memory_stats(d) for d in range(count)], 50)
        print(f"  allocator retries ({count} devices): {read:.0f} µs every 2 s")
        figures["alloc_retries_us"] = read
    return figures


def _wake_us(directory: str) -> float:
    """One ``FactsAgent.wake`` of a rank with a model, an optimizer and sync sites."""
    model = model_on("cpu")
    hook_privately(model, lambda *args: None)
    knobs = KnobWatch(torch, SimpleNamespace(_found=[model], searching=False))
    writer = SimpleNamespace(on_close=lambda hook: None)
    probe = SimpleNamespace(_step=1000, _writer=writer, _tick_at=1 << 62)
    agent = FactsAgent(probe, torch, knobs)
    segment = Path(directory) / "1-r0-00000000.ring"
    agent.wake(segment)

    def wake() -> None:
        agent._last_wake = -1e9
        probe._step += 1
        agent.wake(segment)

    return per_call_us(wake, 200)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if cuda else "cpu")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--profiles", type=int, default=6)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU (one thread)"
    if args.device == "cpu":
        torch.set_num_threads(1)
    print(f"torch {torch.__version__} on {name}, Python {sys.version.split()[0]}")
    profile = bench_profile(args.device, args.steps, args.profiles)
    figures = {
        "device": name,
        "torch": torch.__version__,
        "profile": profile,
        "forward_sample": bench_forward_sample(args.device, 1e3 / profile["step_ms"]),
        "sync_hook": bench_sync_hook(args.device, 20_000),
        "facts_file": bench_facts_file(args.device),
    }
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
