"""What booking DDP's wait on peers costs, for the designs issue 9 names and the one shipped.
Prints figures; asserts nothing.

``python benchmarks/bench_comm.py [--steps N] [--repeats R]``

One process, gloo, world size 1 (the collective itself is cheap, so the overhead shows), a
1 MB-gradient MLP in 4 DDP buckets, single-threaded; batches of steps interleaved across modes,
best and median batch per mode:

* ``builtin``: DDP as it is, nothing booked (the baseline).
* ``comm hook``: a DDP comm hook that books, as the issue sketches: each bucket runs DDP's
  default reduction in Python (scale by 1/size, SUM all-reduce, ``.then`` to hand back the
  tensor, which DDP requires of Python hooks) and arms the end-of-backward booking.
* ``final callback`` (shipped, traintop.comm_hooks): a hook on the loss queues one autograd
  final callback per backward; DDP's reduction is untouched.

Then the other named design, wrapping the ``torch.distributed`` entry points: ns per
``dist.all_reduce`` call bare and inside a timing wrapper (a ``probe.phase`` block).  Such a
wrapper never sees DDP's own reduction (the reducer calls the process group from C++).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from traintop.comm_hooks import WaitBooker, _armed_backward  # noqa: E402
from traintop.probe import NO_PHASE, Probe  # noqa: E402
from traintop.ring import RingWriter  # noqa: E402

FEATURES, LAYERS, BATCH = 256, 4, 32
BUCKET_CAP_MB = 0.25  # ~1 MB of gradients in 4 buckets: several hook calls per step


def ddp() -> torch.nn.parallel.DistributedDataParallel:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(FEATURES, FEATURES) for _ in range(LAYERS)]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(FEATURES, 10))
    return torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=BUCKET_CAP_MB)


def booking_comm_hook(booker: WaitBooker, queue_callback):
    """The comm-hook design: DDP's default reduction in Python; the first bucket of each
    backward queues the final callback that opens "comm" (DDP checks a hook's annotations at
    run time and this module's are strings, hence none)."""
    armed = [False]

    def compute_done() -> None:
        armed[0] = False
        booker._compute_done()

    def hook(group, bucket):
        if not armed[0]:
            queue_callback(compute_done)
            armed[0] = True
        buffer = bucket.buffer().mul_(1.0 / group.size())
        return group.allreduce([buffer]).get_future().then(lambda fut: fut.value()[0])

    return hook


def step_ns(model, optimizer, backward, probe: Probe, steps: int) -> float:
    """Mean ns per training step; the probe steps as the shim's optimizer hook makes it."""
    inputs, labels = torch.randn(BATCH, FEATURES), torch.randint(0, 10, (BATCH,))
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        backward(loss)
        probe._switch(NO_PHASE)
        optimizer.step()
        probe.step()
        probe._auto = True
    return (time.perf_counter_ns() - t0) / steps


def modes(probe: Probe) -> dict:
    """``{name: (model, optimizer, backward)}`` for the three ways of running a step."""
    engine = torch.autograd.Variable._execution_engine
    booker = WaitBooker(probe, engine.queue_callback, dist.is_initialized)
    hooked = ddp()
    hooked.register_comm_hook(
        hooked.process_group, booking_comm_hook(booker, engine.queue_callback)
    )
    plain = torch.Tensor.backward
    built = {
        "builtin": (ddp(), plain),
        "comm hook": (hooked, plain),
        "final callback": (ddp(), _armed_backward(booker, plain)),
    }
    return {k: (m, torch.optim.SGD(m.parameters(), lr=1e-3), b) for k, (m, b) in built.items()}


def step_figures(probe: Probe, steps: int, repeats: int) -> None:
    runs: dict[str, list[float]] = {}
    table = modes(probe)
    for model, optimizer, backward in table.values():
        step_ns(model, optimizer, backward, probe, 20)  # warm-up; DDP rebuilds its buckets
    for _ in range(repeats):
        for name, (model, optimizer, backward) in table.items():
            runs.setdefault(name, []).append(step_ns(model, optimizer, backward, probe, steps))
    base = min(runs["builtin"])
    print(f"DDP step, {steps} steps x {repeats} batches, 4 buckets: best (median) per mode")
    for name, ns in runs.items():
        extra = f", {(min(ns) - base) / 1e3:+.1f} µs/step" if name != "builtin" else ""
        print(f"  {name:15} {min(ns) / 1e3:8.1f} µs ({statistics.median(ns) / 1e3:.1f})"
              f"  {min(ns) / base:.3f}x{extra}")  # fmt: skip


def call_ns(body, n: int, repeats: int) -> float:
    """Best batch's mean ns per call: what the code costs, without the machine's preemptions."""
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            body()
        samples.append((time.perf_counter_ns() - t0) / n)
    return min(samples)


def wrapper_figures(probe: Probe, repeats: int) -> None:
    """A ``torch.distributed`` entry-point wrapper's cost per call."""
    tensor = torch.zeros(FEATURES * FEATURES)
    phase = probe.phase("comm")
    probe._auto = True

    def wrapped() -> None:
        with phase:
            dist.all_reduce(tensor)

    bare = call_ns(lambda: dist.all_reduce(tensor), 2000, repeats)
    timed = call_ns(wrapped, 2000, repeats)
    print(f"dist.all_reduce of 256 KB, best of {repeats}: bare {bare / 1e3:.1f} µs, in a timing "
          f"wrapper {timed / 1e3:.1f} µs ({(timed - bare) / 1e3:+.2f} µs per call; it sees no "
          f"DDP bucket)")  # fmt: skip


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args.add_argument("--steps", type=int, default=200)
    args.add_argument("--repeats", type=int, default=9)
    opts = args.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        probe = Probe("bench", writer_factory=lambda phases: RingWriter.create(
            name="bench", phases=phases, directory=tmp, capacity=4096))  # fmt: skip
        probe._auto = True
        try:
            print(f"load average {os.getloadavg()[0]:.2f}; torch {torch.__version__}, gloo, 1 rank")
            step_figures(probe, opts.steps, opts.repeats)
            wrapper_figures(probe, opts.repeats)
        finally:
            probe.close()
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
