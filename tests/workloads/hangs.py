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
    if step == HANG_AT and case == "sleep" and rank == ODD:
        time.sleep(FOREVER_S)
    if step == HANG_AT and case == "gil" and rank == ODD:
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


# More cases (kept below the others, whose line numbers the tests quote):
# * ``steady``: nothing goes wrong (the test itself stops or freezes a rank from outside);
# * ``spin``: rank ``--odd`` computes in Python for ``--spin-s`` seconds before the step's
#   all-reduce (an evaluation on one rank), then training goes on;
# * ``fifo``: one process; in its second epoch (its workers forked after the run started) a
#   DataLoader worker reads a FIFO nobody writes (``--fifo``): a read that never returns, as on
#   a dead network mount.
# ``--odd`` picks the rank that misbehaves in ``sleep``, ``gil`` and ``spin`` (2 by default).


class FifoBatches(Batches):
    """Item ``stuck_at`` of the second epoch reads ``fifo`` and never comes back."""

    def __init__(self, stuck_at: int, fifo: str, size: int) -> None:
        super().__init__(stuck_at)
        self.fifo = fifo
        self.size = size
        self.epoch = 0  # set before each epoch: its workers are forked with it

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if index == self.stuck_at and self.epoch == 1:
            read_shard(self.fifo)
        return torch.randn(16), torch.randn(4)


def read_shard(path: str) -> bytes:
    """A read that never returns: the FIFO is opened for reading and writing, so the open does
    not wait for a writer, and nobody ever writes."""
    import os

    fd = os.open(path, os.O_RDWR)
    return os.read(fd, 1 << 16)


def spin(seconds: float) -> int:
    """Pure Python work for ``seconds``: a rank busy on its CPU, not stuck."""
    end, total = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        total += sum(i * i for i in range(1000))
    return total


def epochs(loader: DataLoader, data: Batches, count: int):
    """(step, batch) over ``count`` passes of ``loader``, steps counted across them."""
    step = 0
    for epoch in range(count):
        data.epoch = epoch
        for batch in loader:
            yield step, batch
            step += 1


def train(opts: argparse.Namespace) -> None:
    distributed = opts.case not in ("loader", "fifo")
    if distributed:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=opts.timeout_s))
    rank = dist.get_rank() if distributed else 0
    model = Model(sleeper=opts.case == "ddp" and rank == 1)
    net = torch.nn.parallel.DistributedDataParallel(model) if opts.case == "ddp" else model
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    fifo = opts.case == "fifo"
    stuck_at = HANG_AT * 8 if opts.case == "loader" else None
    data = FifoBatches(HANG_AT * 4, opts.fifo, HANG_AT * 8) if fifo else Batches(stuck_at)
    workers = {"loader": 1, "fifo": 2}.get(opts.case, 0)
    loader = DataLoader(data, batch_size=8, num_workers=workers)
    for step, (x, y) in epochs(loader, data, 2 if fifo else 1):
        if step >= opts.steps * 4 and opts.case != "steady":
            break
        loss = torch.nn.functional.mse_loss(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        slow = opts.case == "checkpoint" and HANG_AT <= step < 2 * HANG_AT
        time.sleep(STEP_S * (4 if slow else 1))
        if step == HANG_AT and opts.case == "spin" and rank == ODD:
            spin(opts.spin_s)  # the others wait for it in the step's all-reduce
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
    global HANG_AT, ODD
    args = argparse.ArgumentParser()
    args.add_argument("--case", required=True)
    args.add_argument("--steps", type=int, default=60)
    args.add_argument("--save-s", type=float, default=30.0)
    args.add_argument("--timeout-s", type=float, default=150.0)
    args.add_argument("--odd", type=int, default=2)
    args.add_argument("--spin-s", type=float, default=60.0)
    args.add_argument("--fifo")
    opts = args.parse_args()
    HANG_AT, ODD = opts.steps, opts.odd
    torch.set_num_threads(1)
    train(opts)


HANG_AT, ODD = 60, 2

if __name__ == "__main__":
    main()
