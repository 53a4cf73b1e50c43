"""`straggler_offcpu` / `straggler_oncpu`: a gloo DDP job in which one rank's forward is slow.

Ranks come from ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``, as torchrun sets them.
The rank named by ``--slow-rank`` spends ``--extra-ms`` more per step inside its forward pass:
``--mode offcpu`` blocks without using a CPU (a rank waiting on a slow device, a lock, a remote
call), ``--mode oncpu`` burns its core for that long (a rank whose CPU-side work is heavier: an
unlucky shard, a debug hook).  Input is in memory and the model is small, so every other rank
finishes its own step quickly and then waits for the slow one inside DDP's gradient all-reduce.
"""

from __future__ import annotations

import time
from datetime import timedelta

import torch
import torch.distributed as dist
from common import parser
from ddp_network import train_ranks
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

FEATURES = 64


def burn(seconds: float) -> None:
    """Keep one core busy with small matrix products for ``seconds`` of wall time."""
    a = torch.randn(48, 48)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        a = torch.tanh(a @ a)


class SlowForward(torch.nn.Module):
    """A small MLP whose forward pays ``extra_s`` more, off or on the CPU."""

    def __init__(self, extra_s: float, mode: str) -> None:
        super().__init__()
        self.body = torch.nn.Linear(FEATURES, FEATURES)
        self.head = torch.nn.Linear(FEATURES, 10)
        self.extra_s, self.mode = extra_s, mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.extra_s > 0:
            (time.sleep if self.mode == "offcpu" else burn)(self.extra_s)
        return self.head(torch.relu(self.body(x)))


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--slow-rank", type=int, default=2)
    args.add_argument("--extra-ms", type=float, default=150.0, help="extra forward time")
    args.add_argument("--mode", choices=("offcpu", "oncpu"), default="offcpu")
    opts = args.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=90))
    slow = dist.get_rank() == opts.slow_rank
    model = DistributedDataParallel(SlowForward(opts.extra_ms / 1000 if slow else 0.0, opts.mode))
    data = TensorDataset(torch.randn(2048, FEATURES), torch.randint(0, 10, (2048,)))
    loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=0)
    train_ranks(loader, model, opts.seconds, f"slow-rank {opts.mode} slow={slow}")


if __name__ == "__main__":
    main()
