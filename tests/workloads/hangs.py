"""Training scripts that hang (or only look like it), one per case, for tests/test_hangs.py.

Plain PyTorch with no traintop in it, started under `traintop run -- torchrun ...` (the
``loader`` case as a single process).  Every case trains a tiny model on gloo for ``--steps``
normal steps (about 20 ms each), then:

* ``sleep``: rank 2 sleeps in ``log_metrics`` before the step's ``dist.all_reduce``;
* ``skip``: rank 1 skips the step's all-reduce and goes on to the barrier that ends the epoch;
* ``shapes``: ranks 2 and 3 reduce a tensor twice the size the others reduce;
* ``gil``: rank 2 calls C (``sleep`` through ``ctypes.PyDLL``) that holds the GIL;
* ``exit``: rank 3 leaves the loop and exits cleanly;
* ``ddp``: under DDP, rank 1 sleeps inside its model's forward;
* ``loader``: one process, whose DataLoader worker never returns a batch;
* ``checkpoint``: every rank's steps take four times as long for ``--steps`` steps (a job
  that slows to a quarter of its rate), then rank 0 saves a checkpoint that takes ``--save-s``
  seconds while the others wait in a barrier, then training goes on; it must never read hung.

The gloo timeout (``--timeout-s``) is short, so no case lingers after its test.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import io
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

STEP_S = 0.02
FOREVER_S = 3600


class Model(torch.nn.Module):
    """A tiny MLP; ``sleeper`` ranks sleep in forward from ``hang_at`` on (the ddp case)."""

    def __init__(self, sleeper: bool = False) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
        )
        self.sleeper = sleeper
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.sleeper and self.calls > HANG_AT:
            time.sleep(FOREVER_S)
        return self.net(x)


class Batches(Dataset):
    """Random batches; item ``stuck_at`` never comes back (the loader case)."""

    def __init__(self, stuck_at: int | None) -> None:
        self.stuck_at = stuck_at

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if index == self.stuck_at:
            time.sleep(FOREVER_S)
        return torch.randn(16), torch.randn(4)


class SlowFile(io.BytesIO):
    """A checkpoint destination that takes ``seconds`` to write: a slow shared filesystem."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def write(self, data: bytes) -> int:
        if self.seconds > 0:
            time.sleep(self.seconds)
            self.seconds = 0
        return super().write(data)


def log_metrics(loss: torch.Tensor, rank: int, case: str, step: int) -> torch.Tensor:
    """The step's metric all-reduce, where the cases go wrong."""
    metric = loss.detach().reshape(1).repeat(1024)
    if step == HANG_AT and case == "sleep" and rank == 2:
        time.sleep(FOREVER_S)
    if step == HANG_AT and case == "gil" and rank == 2:
        hold_the_gil()
    if step == HANG_AT and case == "skip" and rank == 1:
        return metric
    if step == HANG_AT and case == "shapes" and rank >= 2:
        metric = metric.repeat(2)
    dist.all_reduce(metric)
    return metric


def hold_the_gil() -> None:
    """libc's sleep through PyDLL: C code that keeps the GIL for as long as it runs."""
    ctypes.PyDLL(None).sleep(FOREVER_S)


def save_checkpoint(model: torch.nn.Module, seconds: float) -> None:
    torch.save(model.state_dict(), SlowFile(seconds))


def train(opts: argparse.Namespace) -> None:
    distributed = opts.case != "loader"
    if distributed:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=opts.timeout_s))
    rank = dist.get_rank() if distributed else 0
    model = Model(sleeper=opts.case == "ddp" and rank == 1)
    net = torch.nn.parallel.DistributedDataParallel(model) if opts.case == "ddp" else model
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    stuck_at = HANG_AT * 8 if opts.case == "loader" else None
    loader = DataLoader(Batches(stuck_at), batch_size=8, num_workers=1 if stuck_at else 0)
    for step, (x, y) in enumerate(loader):
        if step >= opts.steps * 4:
            break
        loss = torch.nn.functional.mse_loss(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        slow = opts.case == "checkpoint" and HANG_AT <= step < 2 * HANG_AT
        time.sleep(STEP_S * (4 if slow else 1))
        if distributed and opts.case != "ddp":
            log_metrics(loss, rank, opts.case, step)
        if step == HANG_AT and opts.case == "exit" and rank == 3:
            sys.exit(0)
        if step == HANG_AT and opts.case == "skip":
            dist.barrier()  # the end of an epoch
        if step == 2 * HANG_AT and opts.case == "checkpoint":
            if rank == 0:
                save_checkpoint(model, opts.save_s)
            dist.barrier()
    if distributed:
        dist.destroy_process_group()


def main() -> None:
    global HANG_AT
    args = argparse.ArgumentParser()
    args.add_argument("--case", required=True)
    args.add_argument("--steps", type=int, default=60)
    args.add_argument("--save-s", type=float, default=30.0)
    args.add_argument("--timeout-s", type=float, default=150.0)
    opts = args.parse_args()
    HANG_AT = opts.steps
    torch.set_num_threads(1)
    train(opts)


HANG_AT = 60

if __name__ == "__main__":
    main()
