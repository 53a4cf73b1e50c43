"""The floor under any zero-code pure-Python probe: what the same patch sites cost with hooks
that do nothing, and with hooks that only read the clock and store it.  Prints figures; asserts
nothing.

``python benchmarks/bench_floor.py [--rounds 15] [--callgrind] [--reps 3] [--json FILE]``

Issue 35 asks for ≤ 10 µs a step and ≤ 2 µs a blocking collective.  ``bench_budget.py`` says
what traintop's hooks cost; this says what no Python probe at those sites can go under, so the
targets can be judged reachable or not.  In one warm process (``bench_budget.Bench``: a CPU step
of one DataLoader batch, one backward, one optimizer step) the step runs under each variant:

* plain: torch, no patches (traintop's taken out, ``Hooks.off``);
* empty: the same sites with pass-through hooks, a ``functools.wraps`` wrapper on
  ``_BaseDataLoaderIter.__next__`` and on ``Tensor.backward`` that only call the original, and
  global optimizer step pre/post hooks returning None: the cost of being called at all;
* raw times: the empty hooks plus, at each of the real probe's six boundaries (batch asked,
  batch in, backward begins, backward ends, optimizer pre, optimizer post), one clock read
  (``probe._clock``) stored into a slot of a shared-memory ``memoryview.cast('q')``, and one
  commit word at step end: the cheapest design where the reader derives the phases;
* raw + rows: raw times plus the batch's row count (``infer_batch_size``) stored too;
* traintop: the probe as ``traintop run`` installs it.

The collective (a no-op all-reduce, as in ``bench_budget.collective_ops``) runs bare, in an
empty wrapper, in a wrapper with two clock reads and stores, and as traintop wraps it.

With ``--callgrind`` the blocks run again in a child under valgrind (``instr_count.py``), each
counted ``--reps`` times (the lowest and the spread are shown): instructions are the same on a
loaded box, wall time is not.  µs are derived from instructions two ways: at the plain step's
ns per instruction (``bench_budget``'s way; torch's C++ runs more instructions per ns than the
interpreter does) and at the ns per instruction of the collective wrappers' pure-Python code in
a hot loop (wall / instructions, traintop over bare).
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import json
import mmap
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_budget import STEPS, Bench, Op, collective_ops, init_group, nothing, paired
from instr_count import Counter, under_callgrind
from onoff import run_quartets, summarize

VARIANTS = ("plain", "empty", "raw times", "raw + rows", "traintop")
SITE_OPS = ("loader", "backward", "optimizer")  # each site alone, ``Bench.ops``
N_SITE = 400  # calls per site or collective block
N_PRIM = 2000  # iterations per primitive block
Hooks4 = tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any], Callable[..., Any]]


def shared_slots() -> memoryview:
    """Eight-byte slots in a shared mapping, as a probe's segment would offer them."""
    return memoryview(mmap.mmap(-1, mmap.PAGESIZE)).cast("q")


def empty_hooks(next_: Callable[[Any], Any], backward: Callable[..., Any]) -> Hooks4:
    """Pass-through hooks: what any zero-code probe pays for being called at these sites."""

    @functools.wraps(next_)
    def __next__(self: Any) -> Any:
        return next_(self)

    @functools.wraps(backward)
    def backward_(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            return backward(self, *args, **kwargs)
        return backward(self)

    def pre(optimizer: Any, args: Any, kwargs: Any) -> None:
        return None

    def post(optimizer: Any, args: Any, kwargs: Any) -> None:
        return None

    return __next__, backward_, pre, post


def raw_hooks(next_: Callable[[Any], Any], backward: Callable[..., Any],
              clock: Callable[[], int], buf: memoryview) -> Hooks4:  # fmt: skip
    """One clock read and one slot store per boundary, a commit word at step end: the phases
    are left for the reader to derive (no arithmetic, no state on the training thread)."""
    seq = itertools.count(1)

    @functools.wraps(next_)
    def __next__(self: Any) -> Any:
        buf[0] = clock()
        batch = next_(self)
        buf[1] = clock()
        return batch

    @functools.wraps(backward)
    def backward_(self: Any, *args: Any, **kwargs: Any) -> Any:
        buf[2] = clock()
        result = backward(self, *args, **kwargs) if args or kwargs else backward(self)
        buf[3] = clock()
        return result

    def pre(optimizer: Any, args: Any, kwargs: Any) -> None:
        buf[4] = clock()

    def post(optimizer: Any, args: Any, kwargs: Any) -> None:
        buf[5] = clock()
        buf[6] = next(seq)

    return __next__, backward_, pre, post


def rows_hooks(next_: Callable[[Any], Any], backward: Callable[..., Any],
               clock: Callable[[], int], buf: memoryview) -> Hooks4:  # fmt: skip
    """``raw_hooks`` with the batch's rows stored too: throughput needs them, and finding them
    in an arbitrary batch is work no reader can do."""
    from traintop.loader import infer_batch_size

    _next, backward_, pre, post = raw_hooks(next_, backward, clock, buf)

    @functools.wraps(next_)
    def __next__(self: Any) -> Any:
        buf[0] = clock()
        batch = next_(self)
        buf[1] = clock()
        buf[7] = infer_batch_size(batch) or 0
        return batch

    return __next__, backward_, pre, post


class Floor:
    """Switches the step's patch sites between the variants (one installed at a time)."""

    def __init__(self, bench: Bench) -> None:
        from torch.optim import optimizer
        from torch.utils.data import dataloader

        self.bench, self.hooks = bench, bench.hooks
        self.hooks.off()
        self.iterator, self.tensor = dataloader._BaseDataLoaderIter, bench.torch.Tensor
        self.registers = (optimizer.register_optimizer_step_pre_hook,
                          optimizer.register_optimizer_step_post_hook)  # fmt: skip
        self.originals = (self.iterator.__next__, self.tensor.backward)
        clock, buf = bench.probe._clock, shared_slots()
        self.makers: dict[str, Callable[[], Hooks4]] = {
            "empty": lambda: empty_hooks(*self.originals),
            "raw times": lambda: raw_hooks(*self.originals, clock, buf),
            "raw + rows": lambda: rows_hooks(*self.originals, clock, buf),
        }
        self.handles: list[Any] = []
        self.current = "plain"

    def select(self, variant: str) -> None:
        """Take the current variant out (back to plain torch) and put ``variant`` in."""
        if variant == self.current:
            return
        self._plain()
        if variant == "traintop":
            self.hooks.on()
        elif variant != "plain":
            next_, backward, pre, post = self.makers[variant]()
            self.iterator.__next__, self.tensor.backward = next_, backward
            self.handles = [self.registers[0](pre), self.registers[1](post)]
        self.current = variant

    def _plain(self) -> None:
        if self.current == "traintop":
            self.hooks.off()
        self.iterator.__next__, self.tensor.backward = self.originals
        for handle in self.handles:
            handle.remove()
        self.handles = []


def collective_variants(torch: Any, probe: Any, buf: memoryview) -> dict[str, Op]:
    """The no-op collective bare, in an empty wrapper, with raw times, and traintop's."""
    bare, booked = collective_ops(torch, probe)
    clock, tensor = probe._clock, torch.zeros(4)

    def no_op(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> None:
        """torch.distributed.all_reduce's signature, no work."""

    def empty(*args: Any, **kwargs: Any) -> Any:
        return no_op(*args, **kwargs) if kwargs else no_op(*args)

    def raw(*args: Any, **kwargs: Any) -> Any:
        buf[8] = clock()
        result = no_op(*args, **kwargs) if kwargs else no_op(*args)
        buf[9] = clock()
        return result

    def loop(call: Callable[..., Any]) -> Op:
        def op(n: int) -> None:
            for _ in range(n):
                call(tensor)

        return op

    return {"plain": bare, "empty": loop(functools.wraps(no_op)(empty)),
            "raw times": loop(functools.wraps(no_op)(raw)), "traintop": booked}  # fmt: skip


def primitives(clock: Callable[[], int], buf: memoryview) -> dict[str, Op]:
    """The parts a boundary is made of, each in a loop (``loop`` is the loop alone)."""

    def clock_read(n: int) -> None:
        for _ in range(n):
            clock()

    def store(n: int) -> None:
        for i in range(n):
            buf[0] = i

    def clock_store(n: int) -> None:
        for _ in range(n):
            buf[0] = clock()

    def call(n: int) -> None:
        def f() -> None: ...

        for _ in range(n):
            f()

    return {"loop": nothing, "clock read": clock_read, "slot store": store,
            "clock read + store": clock_store, "Python call": call}  # fmt: skip


def count_blocks(counter: Counter, ops: dict[str, Op], select: Callable[[str], None],
                 n: int, reps: int) -> dict[str, list[float]]:  # fmt: skip
    """Instructions per call of each variant's block, ``reps`` times each (variants in turn)."""
    out: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(reps):
        for name, op in ops.items():
            select(name)
            op(n)
            gc.collect()
            out[name].append(counter.count(name, lambda op=op: op(n)) / n)  # type: ignore[misc]
    select("plain")
    return out


def wall_blocks(ops: dict[str, Op], select: Callable[[str], None], n: int,
                rounds: int) -> dict[str, dict]:  # fmt: skip
    """Each variant against plain, ABBA in thread CPU (``bench_budget.paired``)."""
    out = {}
    for name, op in ops.items():
        if name != "plain":
            out[name] = paired(op, lambda on, name=name: select(name if on else "plain"),
                               rounds, n)  # fmt: skip
    select("plain")
    return out


def measure(rounds: int, reps: int, counter: Counter | None) -> dict[str, Any]:
    """Every block, as instructions (``counter``) or as thread CPU time."""
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        bench = Bench(torch, tmp)
        floor = Floor(bench)
        site_ops = bench.ops()
        step = {name: bench.steps for name in VARIANTS}
        out = {"step": _measure(counter, step, floor.select, STEPS, rounds, reps)}
        for site in SITE_OPS:
            ops = dict.fromkeys(VARIANTS, site_ops[site])
            out[site] = _measure(counter, ops, floor.select, N_SITE, rounds, reps)
        init_group(torch, tmp)
        out |= _collective_and_parts(counter, torch, bench.probe, rounds, reps)
        floor.select("traintop")
        bench.probe.close()
        torch.distributed.destroy_process_group()
    return out


def _collective_and_parts(counter: Counter | None, torch: Any, probe: Any, rounds: int,
                          reps: int) -> dict[str, Any]:  # fmt: skip
    buf = shared_slots()
    ops = collective_variants(torch, probe, buf)
    chosen = _chooser(ops)
    collective = _measure(counter, {k: chosen[1] for k in ops}, chosen[0], N_SITE, rounds, reps)
    parts = primitives(probe._clock, buf)
    prim = _chooser(parts | {"plain": nothing})
    names = dict.fromkeys([*parts, "plain"], prim[1])
    return {"collective": collective,
            "parts": _measure(counter, names, prim[0], N_PRIM, rounds, reps)}  # fmt: skip


def _chooser(ops: dict[str, Op]) -> tuple[Callable[[str], None], Op]:
    """A ``select`` that picks which op the returned op runs (variants with no patching)."""
    chosen = [ops["plain"]]

    def select(name: str) -> None:
        chosen[0] = ops[name]

    return select, lambda n: chosen[0](n)


def _measure(counter: Counter | None, ops: dict[str, Op], select: Callable[[str], None],
             n: int, rounds: int, reps: int) -> dict:  # fmt: skip
    if counter is not None:
        return count_blocks(counter, ops, select, n, reps)
    return wall_blocks(ops, select, n, rounds)


def quartet_costs(quartets: int, steps: int = 200) -> list[str]:
    """Each variant's whole-step cost over plain as ``onoff``'s A B B A quartets estimate it
    (mean and 95 % interval, thread CPU): the wall check with an error bar, which ``paired``'s
    best and median differences lack on a shared box."""
    import torch

    torch.set_num_threads(1)
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        bench = Bench(torch, tmp)
        floor = Floor(bench)
        for name in VARIANTS[1:]:
            blocks = run_quartets(bench.step, lambda on, name=name: floor.select(
                name if on else "plain"), steps=steps, quartets=quartets, controls=0,
                clock=time.thread_time_ns)  # fmt: skip
            lines.append(_quartet_line(name, summarize(blocks)))
        floor.select("traintop")
        bench.probe.close()
    return lines


def _quartet_line(name: str, summary: Any) -> str:
    """``onoff.Summary``'s cost as a share and in µs of the median plain step."""
    cost, step = summary.cost, summary.median_step_us
    if cost is None:
        return f"{name:12s} n/a"
    return (f"{name:12s} {cost} = {cost.mean * step:+.2f} µs [{cost.low * step:+.2f}, "
            f"{cost.high * step:+.2f}] of a {step:.1f} µs step")  # fmt: skip


def child(reps: int) -> None:
    """Under callgrind: the instruction counts, as JSON on stdout."""
    counter = Counter()
    if not counter.active:
        raise SystemExit("--child must run under instr_count.under_callgrind")
    print(json.dumps(measure(1, reps, counter)))


def rates(wall: dict, ir: dict) -> tuple[float, float]:
    """ns per instruction: the plain step's, and the collective wrapper's Python code's."""
    plain_ns = min(v["off_ns"] for v in wall["step"].values())
    step_rate = plain_ns / min(ir["step"]["plain"])
    coll = wall["collective"]["traintop"]
    extra = min(ir["collective"]["traintop"]) - min(ir["collective"]["plain"])
    return step_rate, coll["best_ns"] / extra


def report(wall: dict, ir: dict | None) -> list[str]:
    """The table: each block's variants over plain, in instructions, µs and wall."""
    lines = [f"plain step: {min(v['off_ns'] for v in wall['step'].values()) / 1e3:.1f} µs "
             "(best batch, thread CPU)"]  # fmt: skip
    step_rate, py_rate = rates(wall, ir) if ir else (0.0, 0.0)
    if ir:
        lines.append(f"ns/instr: plain step {step_rate:.3f}; Python hook code {py_rate:.3f}")
    for block in ("step", *SITE_OPS, "collective", "parts"):
        lines += ["", _head(block, ir is not None)]
        for name, figures in wall[block].items():
            lines.append(_row(name, figures, ir[block] if ir else None, step_rate, py_rate))
    return lines


def _head(block: str, counted: bool) -> str:
    head = f"{block + ' variant':24s} {'wall best':>10s} {'median':>8s}"
    if counted:
        head += f" {'instr over plain':>17s} {'spread':>7s} {'µs@step':>8s} {'µs@py':>7s}"
    return head


def _row(name: str, wall: dict, ir: dict | None, step_rate: float, py_rate: float) -> str:
    line = f"{name:24s} {wall['best_ns'] / 1e3:+9.2f}µ {wall['median_ns'] / 1e3:+8.2f}"
    if ir is None:
        return line
    plain = min(ir["plain"])
    over = min(ir[name]) - plain
    spread = max(ir[name]) - min(ir[name]) + max(ir["plain"]) - plain
    return line + (f" {over:+17,.0f} {spread:7,.0f} {over * step_rate / 1e3:+8.2f}"
                   f" {over * py_rate / 1e3:+7.2f}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="ABBA rounds per wall figure")
    parser.add_argument("--reps", type=int, default=3, help="counts per block (callgrind)")
    parser.add_argument("--callgrind", action="store_true", help="instruction counts too")
    parser.add_argument("--quartets", type=int, default=0,
                        help="also onoff's A B B A quartets per variant (whole step)")  # fmt: skip
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.reps)
        return 0
    ir = _callgrind(args.reps) if args.callgrind else None  # first: one heavy process at a time
    print(f"load average {os.getloadavg()[0]:.2f}")
    wall = measure(args.rounds, args.reps, None)
    print("\n".join(report(wall, ir)))
    if args.quartets:
        print("\nwhole step over plain, onoff quartets (thread CPU, mean [95 % interval]):")
        print("\n".join(quartet_costs(args.quartets)))
    if args.json:
        args.json.write_text(json.dumps({"wall": wall, "instructions": ir}, indent=1))
    return 0


def _callgrind(reps: int) -> dict:
    t0 = time.monotonic()
    proc = under_callgrind([__file__, "--child", "--reps", str(reps)])
    out, _ = proc.communicate()
    print(f"callgrind child: {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return json.loads(out.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())
