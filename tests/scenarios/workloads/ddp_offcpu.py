"""`offcpu_ranks`: an 8-rank gloo DDP job whose steps wait off-CPU in ``backward``.

On a GPU box most of a step is the host waiting for the device: the backward kernels run on the
GPU while the trainer's thread sleeps in a synchronisation.  Here a custom autograd function
stands in for those kernels: its backward blocks for ``--device-ms`` without using a CPU, as a
``torch.cuda.synchronize()`` would.  The model is tiny, so the all-reduce is cheap and the data
is in memory: nothing a rule blames is short, and the verdict must say where the time goes.
Ranks come from ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``.

The ring all-reduce of eight ranks is 14 hops in turn, each needing the next rank's process
to be woken and run.  On two cores that other processes keep busy each wake-up waits for a
CPU, and the collective took 25-30 ms per step at a load average of 5 (not yet measured on a
quiet machine: each hop moves a few kB over loopback).  At 40 ms of device time (20 steps/s,
as on a real 8-GPU box with a core per rank) that made communication a third of the step on
the shared development VM, and 90 ms still a fifth (the network rule's threshold); 150 ms
(about 6 steps/s) keeps it near a seventh.
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist
from common import parser, report, train
from ddp_network import any_rank_done
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

FEATURES = 64


class DeviceWait(torch.autograd.Function):
    """Identity forward; a backward that waits for the (stand-in) device."""

    wait_s = 0.035

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        time.sleep(DeviceWait.wait_s)
        return grad


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(FEATURES, FEATURES)
        self.head = torch.nn.Linear(FEATURES, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(DeviceWait.apply(torch.relu(self.body(x))))


def every(n: int, agree):
    """Ask the ranks whether to stop every ``n``-th step only: the question is a collective
    too, and asked every step it would double the job's communication."""
    calls = [0]

    def ask(done: bool) -> bool:
        calls[0] += 1
        return calls[0] % n == 0 and agree(done)

    return ask


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--device-ms", type=float, default=150.0)
    opts = args.parse_args()
    DeviceWait.wait_s = opts.device_ms / 1000
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=90))
    data = TensorDataset(torch.randn(1024, FEATURES), torch.randint(0, 10, (1024,)))
    loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=0)
    started = time.monotonic()
    try:
        model = DistributedDataParallel(Model())
        steps = train(loader, model, opts.seconds, agree=every(20, any_rank_done))
        report(f"offcpu rank {dist.get_rank()}", steps, started)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
