"""The probe's cost, measured so it can be trusted: its hooks switched off and on inside one
warm process, in A B B A blocks.  Prints figures; asserts nothing.

``python benchmarks/onoff.py [--steps 200] [--quartets 12] [--controls 3] [--mode unpatch|flag]
[--json FILE]`` runs the CPU job here (a tiny model, one DataLoader batch, one backward and one
optimizer step a step, about 200 µs); ``benchmarks/gpucheck/workloads/gpt_onoff.py`` runs the same
harness on a small GPT on a card (``benchmarks/gpu_check.py``, check ``probe_onoff``).

Whole runs with and without ``traintop run`` differ by more than the probe costs (process start,
allocator and clock state: ±6-9 % between two plain runs on an H100), so the switch is inside
one process (docs/GPU-TRUTH §6.4): A = torch as without traintop (``mode=unpatch``: every patch
and hook taken out, ``traintop.torch_hooks.Hooks.off``; ``mode=flag``: patches left in, the
probe's flag off), B = the hooks as ``traintop run`` installs them.  Blocks of ``steps`` steps
in the order A B B A; per block the median step (step to step, so a GPU's queue stays full);
per quartet ``d = (B1 + B2 - A1 - A2) / (A1 + A2)``, which cancels a linear drift; the mean of d
with its 95 % interval (Student's t).  The first ``controls`` quartets are A/A (both arms off):
their interval must cover 0, else the rig is biased.  Beside it the accounting bound: hook calls
per step × the measured cost of each (``bench_budget.py``), over the median step.  On a GPU each
block logs the SM clock, temperature, power and clock-event reasons (NVML), and a block whose
clocks a power or thermal limit held is flagged; the estimate is given without those quartets too.

Output: one line per block (``quartet arm median_us [sm_mhz temp_c power_w reasons]``), then
``A/A control: mean d +x.xx % [lo, hi]`` and ``probe cost: mean d +x.xx % [lo, hi] (n quartets)
... accounting bound +y.yy %``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ORDER = (False, True, True, False)  # A B B A: False = hooks off
# NVML clock-event reasons that mean a limit held the clocks (power cap, HW slowdown, SW and HW
# thermal, power brake); idle, application clocks and sync boost do not.
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
# Student's t, two-sided 95 %, by degrees of freedom (1.96 beyond)
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
       2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
       2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Block:
    """One block of steps, with the hooks on or off."""

    quartet: int
    control: bool  # an A/A quartet: both arms off
    on: bool
    median_us: float
    steps: int
    telemetry: dict[str, Any] = field(default_factory=dict)

    @property
    def throttled(self) -> bool:
        return bool(self.telemetry.get("reasons", 0) & THROTTLE_MASK)


@dataclass(frozen=True, slots=True)
class Estimate:
    """Mean of the per-quartet d with its 95 % interval."""

    mean: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:+.2%} [{self.low:+.2%}, {self.high:+.2%}] ({self.n} quartets)"


def estimate(ds: list[float]) -> Estimate | None:
    """Mean and 95 % interval (Student's t) of ``ds``; None with fewer than two."""
    if len(ds) < 2:
        return None
    mean = statistics.fmean(ds)
    t = T95[len(ds) - 2] if len(ds) - 1 <= len(T95) else 1.96
    half = t * statistics.stdev(ds) / math.sqrt(len(ds))
    return Estimate(mean, mean - half, mean + half, len(ds))


def quartet_d(blocks: list[Block]) -> float:
    """``(B1 + B2 - A1 - A2) / (A1 + A2)`` of one quartet in A B B A order."""
    a1, b1, b2, a2 = (b.median_us for b in blocks)
    return (b1 + b2 - a1 - a2) / (a1 + a2)


def run_block(step: Callable[[], None], steps: int, sync: Callable[[], None] | None,
              clock: Callable[[], int] = time.perf_counter_ns) -> float:  # fmt: skip
    """Median µs between consecutive step starts, after one step that is not counted."""
    step()
    if sync is not None:
        sync()
    times = []
    last = clock()
    for _ in range(steps):
        step()
        now = clock()
        times.append(now - last)
        last = now
    if sync is not None:
        sync()
    return statistics.median(times) / 1e3


def quartet_s(step: Callable[[], None], steps: int, sync: Callable[[], None] | None,
              pilot: int = 20) -> float:  # fmt: skip
    """Seconds one quartet will take, from ``pilot`` steps timed now (plus the switches)."""
    return 4 * (steps + 1) * run_block(step, pilot, sync) / 1e6 * 1.05


def run_quartets(
    step: Callable[[], None],
    switch: Callable[[bool], None],
    *,
    steps: int = 200,
    quartets: int = 12,
    controls: int = 3,
    sync: Callable[[], None] | None = None,
    telemetry: Callable[[], dict[str, Any]] | None = None,
    report: Callable[[Block], None] = lambda block: None,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> list[Block]:
    """``controls`` A/A quartets, then ``quartets`` A B B A ones; the hooks are left on."""
    blocks = []
    for index in range(controls + quartets):
        control = index < controls
        for on in ORDER:
            switch(on and not control)
            median = run_block(step, steps, sync, clock)
            block = Block(index, control, on and not control, median, steps,
                          telemetry() if telemetry else {})  # fmt: skip
            blocks.append(block)
            report(block)
    switch(True)
    return blocks


@dataclass(frozen=True, slots=True)
class Summary:
    control: Estimate | None
    cost: Estimate | None
    cost_unthrottled: Estimate | None
    throttled_blocks: int
    median_step_us: float
    bound: float | None  # the accounting bound, a share of the median step

    def lines(self) -> list[str]:
        out = [f"A/A control: mean d {self.control or 'n/a'}"
               + ("" if self.control is None or self.control.low <= 0 <= self.control.high
                  else "  BIASED: the interval misses 0")]  # fmt: skip
        bound = "" if self.bound is None else f"; accounting bound {self.bound:+.2%}"
        out.append(f"probe cost: mean d {self.cost or 'n/a'} of a {self.median_step_us:.1f} µs "
                   f"step{bound}")  # fmt: skip
        if self.throttled_blocks:
            out.append(f"throttled blocks: {self.throttled_blocks}; without their quartets: "
                       f"{self.cost_unthrottled or 'n/a'}")  # fmt: skip
        return out


def summarize(blocks: list[Block], bound_us: float | None = None) -> Summary:
    """The control and cost estimates of ``blocks`` (from ``run_quartets``)."""
    by_quartet: dict[int, list[Block]] = {}
    for block in blocks:
        by_quartet.setdefault(block.quartet, []).append(block)
    control = [quartet_d(q) for q in by_quartet.values() if q[0].control]
    real = [q for q in by_quartet.values() if not q[0].control]
    calm = [quartet_d(q) for q in real if not any(b.throttled for b in q)]
    median = statistics.median(b.median_us for q in real for b in q if not b.on) if real else 0.0
    return Summary(
        estimate(control), estimate([quartet_d(q) for q in real]), estimate(calm),
        sum(b.throttled for b in blocks), median,
        None if bound_us is None or not median else bound_us / median,
    )  # fmt: skip


def block_line(block: Block) -> str:
    """``quartet arm median_us`` and the NVML readings of the block, if any."""
    arm = "A" if not block.on else "B"
    kind = "A/A" if block.control else "ABBA"
    extra = " ".join(f"{k}={v}" for k, v in block.telemetry.items())
    flag = "  THROTTLED" if block.throttled else ""
    return f"{kind:4s} q{block.quartet:02d} {arm} {block.median_us:10.1f} µs {extra}{flag}"


def nvml_telemetry(index: int = 0) -> Callable[[], dict[str, Any]] | None:
    """SM clock, temperature, power and clock-event reasons of GPU ``index`` (None w/o NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None

    def read() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, call in (
            ("sm_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            ("temp_c", lambda: pynvml.nvmlDeviceGetTemperature(handle, 0)),
            ("power_w", lambda: round(pynvml.nvmlDeviceGetPowerUsage(handle) / 1000, 1)),
            ("reasons", lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)),
        ):
            try:
                out[key] = call()
            except Exception:
                continue
        return out

    return read


def save(path: Path, blocks: list[Block], summary: Summary, meta: dict[str, Any]) -> None:
    """Every block and the summary as JSON."""
    body = {**meta, "blocks": [asdict(b) | {"throttled": b.throttled} for b in blocks],
            "summary": asdict(summary)}  # fmt: skip
    path.write_text(json.dumps(body, indent=1))


# ---- the CPU job ---------------------------------------------------------------------------


def switcher(hooks: Any, mode: str) -> Callable[[bool], None]:
    """The A/B factor: unpatch and patch again (``unpatch``) or the probe's flag (``flag``)."""
    if mode == "unpatch":
        return lambda on: hooks.on() if on else hooks.off()
    probe = hooks.probe

    def flag(on: bool) -> None:
        if on and not probe._auto:
            probe._restart()
            hooks.boundary.restart()
        probe._auto = on

    return flag


def cpu_job(torch: Any) -> tuple[Callable[[], None], Any]:
    """A ~200 µs CPU step (one batch, one backward, one optimizer step) and its model."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(1 << 15, 32)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x[:, :1]),
                                         batch_size=16)  # fmt: skip
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = endless(loader)

    def step() -> None:
        xb, yb = next(batches)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()

    return step, model


def endless(loader: Any) -> Iterator[Any]:
    """The loader's batches, epoch after epoch."""
    while True:
        yield from loader


def hooked_probe(torch: Any, directory: str) -> Any:
    """A probe as ``traintop run`` makes one (segment in ``directory``), hooks installed."""
    import os

    os.environ["TRAINTOP_RING_DIR"] = directory
    import traintop
    from traintop import torch_hooks

    return torch_hooks.install(traintop.attach("onoff"), torch)


CLOCKS = {"thread": time.thread_time_ns, "wall": time.perf_counter_ns}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps per block")
    parser.add_argument("--quartets", type=int, default=12)
    parser.add_argument("--controls", type=int, default=3, help="A/A quartets first")
    parser.add_argument("--mode", choices=("unpatch", "flag"), default="unpatch")
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="thread",
                        help="thread: this thread's CPU time (other processes on a shared box "
                        "do not count); wall: as a GPU job is timed")  # fmt: skip
    parser.add_argument("--bound-us", type=float, help="the accounting bound (bench_budget.py)")
    parser.add_argument("--json", type=Path, help="write every block and the summary here")
    args = parser.parse_args()
    import tempfile

    import torch

    with tempfile.TemporaryDirectory() as ring:
        step, _model = cpu_job(torch)
        hooks = hooked_probe(torch, ring)
        for _ in range(300):  # warm: the model search ends, the segment exists
            step()
        blocks = run_quartets(step, switcher(hooks, args.mode), steps=args.steps,
                              quartets=args.quartets, controls=args.controls,
                              report=lambda b: print(block_line(b), flush=True),
                              clock=CLOCKS[args.clock])  # fmt: skip
        hooks.probe.close()
    summary = summarize(blocks, args.bound_us)
    print("\n".join(summary.lines()))
    print(f"mode {args.mode}; {args.steps} steps a block; clock {args.clock}; CPU, torch "
          f"{torch.__version__}")  # fmt: skip
    if args.json:
        save(args.json, blocks, summary, {"mode": args.mode, "device": "cpu"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
