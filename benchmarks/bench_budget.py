"""The probe's per-step budget, hook by hook, against torch without it in the same process.
Prints figures; asserts nothing.

``python benchmarks/bench_budget.py [--rounds 15] [--callgrind] [--json FILE]``

The zero-code probe (``traintop.attach()`` + ``traintop.torch_hooks.install``, as ``traintop
run`` makes it) on a CPU step with one DataLoader batch, one backward and one optimizer step.
Each hook site is measured on the operation it wraps, its patches taken out and put back
(``Hooks.off/on``, a real unpatch), interleaved A B B A batch by batch, as this thread's CPU time
per call (other processes on a shared box do not count): the best batch's difference (the
code's cost) and the medians' (with the machine's preemptions).  Then the whole step the same
way, and the accounting: the hooks' costs × their calls per step.

With ``--callgrind`` the same blocks run again in a child under valgrind (instrumentation on
only inside the blocks, ``instr_count.py``): instructions per call, the same on a loaded box as
on an idle one, and µs derived from them at the plain step's ns per instruction.

Targets (issue 35): the whole step ≤ 10 µs over plain; ≤ 2 µs per blocking collective.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from instr_count import Counter, under_callgrind
from onoff import cpu_job, hooked_probe

N_CALLS = 400  # calls per batch
STEPS = 200  # steps per whole-step block
Op = Callable[[int], None]  # runs the operation n times

# (name, the hook sites switched, calls per step): what runs on the training thread per step
SITES = (
    ("DataLoader wait (__next__)", "loader", 1),
    ("backward (timed + comm arm)", "backward", 1),
    ("optimizer pre/post + step close", "optimizer", 1),
    ("module finder (model pre-hook)", "model", 1),
)


def thread_ns(op: Op, n: int) -> float:
    t0 = time.thread_time_ns()
    op(n)
    return (time.thread_time_ns() - t0) / n


def paired(op: Op, switch: Callable[[bool], None], rounds: int, n: int = N_CALLS) -> dict:
    """ns per call off and on, ABBA batch by batch: best and median of each, and their diffs."""
    times: dict[bool, list[float]] = {False: [], True: []}
    op(n)
    for i in range(4 * rounds):
        on = bool(i % 4 in (1, 2))
        switch(on)
        times[on].append(thread_ns(op, n))
    switch(True)
    off, on_ = times[False], times[True]
    return {"off_ns": min(off), "on_ns": min(on_), "best_ns": min(on_) - min(off),
            "median_ns": statistics.median(on_) - statistics.median(off)}  # fmt: skip


def counted(counter: Counter, name: str, op: Op, switch: Callable[[bool], None],
            n: int = N_CALLS) -> dict:  # fmt: skip
    """Instructions per call off and on (one warm block each)."""
    out = {}
    for on in (False, True):
        switch(on)
        op(n)
        out["on_ir" if on else "off_ir"] = counter.count(f"{name} {on}", lambda: op(n)) / n
    switch(True)
    return out | {"ir": out["on_ir"] - out["off_ir"]}


class Bench:
    """The job, its probe and the operations each hook site wraps."""

    def __init__(self, torch: Any, ring: str) -> None:
        self.torch = torch
        self.step, self.model = cpu_job(torch)
        self.hooks = hooked_probe(torch, ring)
        for _ in range(300):  # warm: model found, segment made, the step's pattern learnt
            self.step()
        self.probe = self.hooks.probe
        x = torch.randn(1 << 16, 32)
        self.loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(x, x[:, :1]), batch_size=16)  # fmt: skip
        self.w = torch.zeros(8, requires_grad=True)
        self.xb = x[:16]
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        torch.nn.functional.mse_loss(self.model(self.xb), self.xb[:, :1]).backward()

    def switch(self, kind: str | None) -> Callable[[bool], None]:
        """Hook site ``kind`` (None: all) on or off, the others as they are."""
        kinds = None if kind is None else frozenset({kind})
        return lambda on: self.hooks.on(kinds) if on else self.hooks.off(kinds)

    def ops(self) -> dict[str, Op]:
        torch, w, xb, model, optimizer = self.torch, self.w, self.xb, self.model, self.optimizer

        def loader(n: int) -> None:
            it = iter(self.loader)
            for _ in range(n):
                next(it)

        def backward(n: int) -> None:
            for _ in range(n):
                (w * 2.0).sum().backward()

        def optimize(n: int) -> None:
            for _ in range(n):
                optimizer.step()

        def forward(n: int) -> None:
            for _ in range(n):
                model(xb)

        del torch
        return {"loader": loader, "backward": backward, "optimizer": optimize, "model": forward}

    def steps(self, n: int) -> None:
        for _ in range(n):
            self.step()


def side_ops(probe: Any) -> dict[str, tuple[Op, float]]:
    """Costs with no torch operation to pair with: (op, calls per step)."""
    from traintop import cuda_timing
    from traintop.ring_format import ALIVE_WORD

    writer, acc = probe._writer, [1000, 2000, 3000, 4000, 5000]
    stats = cuda_timing.CudaStepStats(cuda_timing.StepGpuTimer(FakeEvent),
                                      cuda_timing.MemorySampler(lambda: 0))  # fmt: skip
    words = writer.ledger_views()[1]
    r, _w = os.pipe()

    def ring_write(n: int) -> None:
        record = writer.record
        for i in range(n):
            record(i, i, acc, 16)

    def cuda_events(n: int) -> None:
        at_step, clock = stats.at_step, time.monotonic_ns
        for i in range(n):
            at_step(i, clock())

    def alive(n: int) -> None:  # one wake of the helper thread: the store and its select()
        for _ in range(n):
            words[ALIVE_WORD] = time.monotonic_ns()
            select.select([r], [], [], 0)

    return {"ring write (record)": (ring_write, 1.0), "CUDA events (at_step)": (cuda_events, 1.0),
            "helper alive word (per wake)": (alive, 0.0)}  # fmt: skip


class FakeEvent:
    """A CUDA event that is always done: the probe's own work per step, without a GPU."""

    def record(self) -> None: ...

    def query(self) -> bool:
        return True

    def elapsed_time(self, _end: object) -> float:
        return 1.0


def nothing(n: int) -> None:
    for _ in range(n):
        pass


def collective_ops(torch: Any, probe: Any) -> tuple[Op, Op]:
    """A blocking collective that does nothing, bare and as traintop wraps it (gloo group)."""
    from traintop.comm_hooks import CollectiveBooker, _booked_collective, compile_flags

    def no_op(tensor, op=None, group=None, async_op=False):
        """torch.distributed.all_reduce's signature, no work: the wrapper's cost alone."""

    no_op.__name__ = "all_reduce"
    wrapped = _booked_collective(CollectiveBooker(probe, compile_flags(torch)), no_op)
    tensor = torch.zeros(4)

    def make(call: Callable[..., None]) -> Op:
        def op(n: int) -> None:
            for _ in range(n):
                call(tensor)

        return op

    return make(no_op), make(wrapped)


def init_group(torch: Any, tmp: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)


def measure(rounds: int, counter: Counter | None) -> dict:
    """Every figure, by wall (thread CPU) or, with ``counter``, by instructions."""
    import torch

    torch.set_num_threads(1)
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        bench = Bench(torch, tmp)
        ops = bench.ops()
        for name, kind, _calls in SITES:
            out[name] = _pair(counter, name, ops[kind], bench.switch(kind), rounds)
        for name, (op, _calls) in side_ops(bench.probe).items():
            out[name] = _pair(counter, name, op, lambda on: None, rounds, baseline=nothing)
        out["whole step"] = _pair(counter, "whole step", bench.steps, bench.switch(None),
                                  rounds, n=STEPS)  # fmt: skip
        init_group(torch, tmp)
        bare, wrapped = collective_ops(torch, bench.probe)
        out["blocking collective (no-op)"] = _pair(
            counter, "collective", wrapped, lambda on: None, rounds, baseline=bare)  # fmt: skip
        bench.probe.close()
        torch.distributed.destroy_process_group()
    return out


def _pair(counter: Counter | None, name: str, op: Op, switch: Callable[[bool], None],
          rounds: int, n: int = N_CALLS, baseline: Op | None = None) -> dict:  # fmt: skip
    """``op`` with its hooks on against off, or against ``baseline`` (no switch)."""
    if baseline is not None:

        def either(on: bool) -> None:
            chosen[0] = op if on else baseline

        chosen = [op]
        switch, run = either, (lambda k: chosen[0](k))
    else:
        run = op
    if counter is not None:
        return counted(counter, name, run, switch, n)
    return paired(run, switch, rounds, n)


def child() -> None:
    """Under callgrind: the instruction counts, as JSON on stdout."""
    counter = Counter()
    if not counter.active:
        raise SystemExit("--child must run under instr_count.under_callgrind")
    print(json.dumps(measure(1, counter)))


def report(wall: dict, ir: dict | None) -> list[str]:
    step_calls = {name: calls for name, _kind, calls in SITES}
    step_calls |= {"ring write (record)": 0, "CUDA events (at_step)": 0}  # inside optimizer / GPU
    base_ns = wall["whole step"]["off_ns"]
    ns_per_ir = base_ns / ir["whole step"]["off_ir"] if ir else None
    head = f"{'hook':34s} {'per call: best':>15s} {'median':>8s}"
    head += f" {'instr':>8s} {'≈µs':>6s}" if ir else ""
    lines = [head]
    for name, figures in wall.items():
        line = f"{name:34s} {figures['best_ns'] / 1e3:+13.2f}µs {figures['median_ns'] / 1e3:+7.2f}"
        if ir:
            line += f" {ir[name]['ir']:+8.0f} {ir[name]['ir'] * ns_per_ir / 1e3:+6.2f}"
        lines.append(line)
    hooks = sum(wall[name]["best_ns"] * calls for name, calls in step_calls.items())
    lines.append(f"accounting: hooks × calls per step = +{hooks / 1e3:.2f} µs "
                 f"(a {base_ns / 1e3:.0f} µs step, CPU)")  # fmt: skip
    whole = wall["whole step"]
    lines.append(f"whole step: +{whole['best_ns'] / 1e3:.2f} µs best, "
                 f"+{whole['median_ns'] / 1e3:.2f} µs median (target ≤ 10)")  # fmt: skip
    if ir:
        per = ir["whole step"]["ir"]
        lines.append(f"whole step by instructions: {per:+.0f} a step = "
                     f"+{per * ns_per_ir / 1e3:.2f} µs at the plain step's "
                     f"{ns_per_ir:.3f} ns/instr")  # fmt: skip
    coll = wall["blocking collective (no-op)"]
    lines.append(f"per blocking collective: +{coll['best_ns'] / 1e3:.2f} µs (target ≤ 2)")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="ABBA rounds per figure")
    parser.add_argument("--callgrind", action="store_true", help="instruction counts too")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child()
        return 0
    proc = under_callgrind([__file__, "--child"]) if args.callgrind else None
    print(f"load average {os.getloadavg()[0]:.2f}")
    wall = measure(args.rounds, None)
    ir = None
    if proc is not None:
        out, _ = proc.communicate()
        ir = json.loads(out.strip().splitlines()[-1])
    print("\n".join(report(wall, ir)))
    if args.json:
        args.json.write_text(json.dumps({"wall": wall, "instructions": ir}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
