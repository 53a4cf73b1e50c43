"""Two-rank DDP on the CPU started with ``torch.multiprocessing.spawn``: ranks come from the
spawn index, the rendezvous from an ``init_method`` URL; no RANK/WORLD_SIZE in the environment.

usage: spawn_ddp.py PORT [--group-late]  (--group-late: train alone for a second first, then
join the process group, as a job that creates its group lazily would)
"""

import os
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from loop_clock import LoopClock
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

WORLD, BATCH = 2, 16


def train_alone(seconds: float) -> None:
    model = nn.Linear(64, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        model(torch.randn(16, 64)).pow(2).mean().backward()
        optimizer.step()
        time.sleep(0.01)


def train(rank: int, port: int, late: bool) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if late:
        train_alone(1.5)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)  # fmt: skip
    data = TensorDataset(torch.randn(8192, 64), torch.randn(8192, 1))
    loader = DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data))
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 1024), nn.ReLU(),
                                                  nn.Linear(1024, 1024), nn.ReLU(),
                                                  nn.Linear(1024, 1)))  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = LoopClock(float(os.environ.get("LOOP_SECONDS", "4")))
    batches = iter(loader)
    while True:
        go = torch.tensor([float(clock.running())])  # both ranks stop at the same iteration
        clock.mark("sync")
        dist.all_reduce(go, op=dist.ReduceOp.MIN)
        if not go.item():
            break
        clock.mark("data")
        batch = next(batches, None)
        if batch is None:
            batches = iter(loader)
            batch = next(batches)
        x, y = batch
        clock.mark("forward")
        loss = nn.functional.mse_loss(model(x), y)
        clock.mark("backward")
        loss.backward()
        clock.mark("optimizer")
        optimizer.step()
        optimizer.zero_grad()
    clock.starts.pop()  # the last check was no iteration
    clock.report(rank=rank, batch=BATCH)
    # torch's gloo can deadlock at exit: a work thread that drops its last reference to a
    # tensor made in Python needs the GIL, which the main thread holds while it joins that
    # thread in the group's destructor (DDP's Reducer frees the group): 2 runs of 21 on a
    # loaded box, with no traintop.  The barrier's work is dropped after the barrier returns,
    # so the main thread sleeps (without the GIL) until gloo's threads are idle.
    dist.barrier()
    _until_gloo_idle()
    dist.destroy_process_group()
    del model


def _until_gloo_idle(timeout_s: float = 10.0) -> None:
    """Sleep until no other thread of this process is running or runnable (gloo's workers
    have dropped their works), ``timeout_s`` at most."""
    me, deadline = threading.get_native_id(), time.monotonic() + timeout_s
    time.sleep(0.05)
    while time.monotonic() < deadline and _busy_threads(me):
        time.sleep(0.05)


def _busy_threads(me: int) -> bool:
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if int(tid) != me and state == "R":
            return True
    return False


if __name__ == "__main__":
    mp.spawn(train, args=(int(sys.argv[1]), "--group-late" in sys.argv), nprocs=WORLD)
