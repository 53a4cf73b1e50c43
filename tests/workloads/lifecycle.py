"""A plain training script for the life-of-a-run tests (tests/test_run_life.py): no traintop in it.

One process, or every rank of a torchrun job (gloo DDP when WORLD_SIZE > 1).  It trains a tiny
MLP on CPU for ``--steps`` steps (``--steps 0``: until stopped, or for ``--seconds``), each
sleeping ``--step-ms`` (a light job) or computing for ``--busy-ms`` (a CPU-bound one), and
waiting ``--wait-ms`` on an event, as for a prefetching thread's batch (inside the standard
library's ``threading`` frames, where a signal then lands), with:

* ``--warm-s S``: a first step whose forward first spends S seconds of busy CPU in
  ``build_index`` (as ``torch.compile`` does in the first forward);
* ``--raise-at K``: rank ``--raise-rank`` raises ValueError in ``check_batch`` at step K;
* ``--exit-at K --exit-code C``: ``sys.exit(C)`` in ``give_up`` at step K (a script that stops
  itself on a NaN loss);
* ``--spawn N``: N ranks started with ``torch.multiprocessing.spawn`` on ``--port``, as
  PyTorch's DDP tutorial starts them (the launcher's child catches a rank's exception and
  calls ``sys.exit(1)``);
* ``--save-at K --save-s S``: at step K (or after ``--save-after-s`` seconds of training) rank 0
  writes a checkpoint for S seconds (``save_checkpoint``) while the others wait for it in a
  barrier.

It prints ``ready`` once it has stepped ``--ready-at`` times, so a test can stop it then.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import torch
import torch.distributed as dist


def build_index(seconds: float) -> int:
    """Busy CPU, in Python, for ``seconds``."""
    end, count = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        count += 1
    return count


class Net(torch.nn.Module):
    """A tiny MLP whose first forward warms up for ``warm_s`` seconds."""

    def __init__(self, warm_s: float) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
        )
        self.warm_s = warm_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.warm_s > 0:
            build_index(self.warm_s)
            self.warm_s = 0.0
        return self.layers(x)


def compute(milliseconds: float) -> None:
    """Busy CPU in torch for ``milliseconds``: matrix products, no grad."""
    end = time.monotonic() + milliseconds / 1000
    a = torch.randn(128, 128)
    with torch.no_grad():
        while time.monotonic() < end:
            a = torch.tanh(a @ a)


def check_batch(step: int, opts: argparse.Namespace, rank: int) -> None:
    if step == opts.raise_at and rank == opts.raise_rank:
        raise ValueError(f"bad batch at step {step}")


def give_up(step: int, opts: argparse.Namespace) -> None:
    if step == opts.exit_at:
        sys.exit(opts.exit_code)


def save_checkpoint(model: torch.nn.Module, seconds: float) -> None:
    """A slow write, as to a busy shared filesystem."""
    state = {k: v.clone() for k, v in model.state_dict().items()}
    time.sleep(seconds)
    del state


def main() -> int:
    opts = options()
    if opts.spawn:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(opts.port))
        torch.multiprocessing.spawn(spawned, args=(opts.spawn, opts), nprocs=opts.spawn)
        return 0
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    return train(int(os.environ.get("RANK", "0")), world, opts)


def spawned(rank: int, world: int, opts: argparse.Namespace) -> None:
    """An ``mp.spawn`` child: the process group from its arguments, as the tutorial does."""
    dist.init_process_group("gloo", rank=rank, world_size=world)
    train(rank, world, opts)


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--busy-ms", type=float, default=0.0)
    parser.add_argument("--wait-ms", type=float, default=0.0)
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--save-after-s", type=float, default=0.0)
    parser.add_argument("--warm-s", type=float, default=0.0)
    parser.add_argument("--raise-at", type=int, default=-1)
    parser.add_argument("--raise-rank", type=int, default=0)
    parser.add_argument("--exit-at", type=int, default=-1)
    parser.add_argument("--exit-code", type=int, default=1)
    parser.add_argument("--save-at", type=int, default=-1)
    parser.add_argument("--save-s", type=float, default=0.0)
    parser.add_argument("--ready-at", type=int, default=5)
    parser.add_argument("--spawn", type=int, default=0)
    parser.add_argument("--port", type=int, default=29500)
    return parser.parse_args()


def train(rank: int, world: int, opts: argparse.Namespace) -> int:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Net(opts.warm_s)
    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    step, began = 0, time.monotonic()
    prefetched = threading.Event()  # never set: each wait lasts its timeout
    while _more(step, began, opts):
        x = torch.randn(16, 32)
        check_batch(step, opts, rank)
        give_up(step, opts)
        loss = net(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if opts.busy_ms > 0:
            compute(opts.busy_ms)
        else:
            time.sleep(opts.step_ms / 1000)
        if opts.wait_ms > 0:
            prefetched.wait(opts.wait_ms / 1000)
        step += 1
        if step == opts.ready_at:
            print("ready", flush=True)
        if step == opts.save_at or _save_now(began, opts, step):
            opts.save_after_s = 0.0
            if rank == 0:
                save_checkpoint(model, opts.save_s)
            if world > 1:
                dist.barrier()
    if world > 1:
        dist.destroy_process_group()
    print(f"done {step}", flush=True)
    return 0


def _more(step: int, began: float, opts: argparse.Namespace) -> bool:
    """Another step: ``--steps`` of them, else for ``--seconds``, else for ever."""
    if opts.steps > 0:
        return step < opts.steps
    return opts.seconds <= 0 or time.monotonic() - began < opts.seconds


def _save_now(began: float, opts: argparse.Namespace, step: int) -> bool:
    """Time for the checkpoint: every rank agrees on the step (rank 0's clock decides)."""
    if opts.save_after_s <= 0 or not dist.is_initialized():
        return False
    due = torch.tensor([float(time.monotonic() - began >= opts.save_after_s)])
    dist.broadcast(due, src=0)
    return bool(due.item())


if __name__ == "__main__":
    sys.exit(main())
