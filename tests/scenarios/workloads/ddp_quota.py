"""`straggler_quota`: three gloo DDP ranks with equal work; one runs in a tighter CPU quota.

Every rank burns ``--work-ms`` of CPU in its forward (single-threaded), on the same data: the
job is balanced.  The harness starts the rank named by ``--slow-rank`` inside a cgroup whose CFS
quota is a fraction of a CPU (a container or Slurm step with ``--cpus 0.3``): the kernel runs it
for its quota, then throttles it for the rest of each period, and the other ranks wait for it
in DDP's all-reduce at the end of every backward.  Nothing in the script says so.
"""

from __future__ import annotations

import time
from datetime import timedelta

import torch
import torch.distributed as dist
from common import parser
from ddp_network import train_ranks
from ddp_slow_rank import FEATURES
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset


def burn_cpu(seconds: float) -> None:
    """Use ``seconds`` of this thread's CPU time (not of wall time: a throttled rank takes
    longer to get it, which is the point)."""
    a = torch.randn(48, 48)
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        a = torch.tanh(a @ a)


class Work(torch.nn.Module):
    """A small MLP whose forward also burns ``work_s`` of one core, alike on every rank."""

    def __init__(self, work_s: float) -> None:
        super().__init__()
        self.body = torch.nn.Linear(FEATURES, FEATURES)
        self.head = torch.nn.Linear(FEATURES, 10)
        self.work_s = work_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        burn_cpu(self.work_s)
        return self.head(torch.relu(self.body(x)))


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--work-ms", type=float, default=20.0, help="CPU a step, every rank")
    opts = args.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=90))
    model = DistributedDataParallel(Work(opts.work_ms / 1000))
    data = TensorDataset(torch.randn(2048, FEATURES), torch.randint(0, 10, (2048,)))
    loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=0)
    train_ranks(loader, model, opts.seconds, f"quota rank {dist.get_rank()}")


if __name__ == "__main__":
    main()
