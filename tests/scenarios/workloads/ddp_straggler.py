"""`straggler`: a two-rank gloo DDP job in which one rank's input is slow.

Ranks come from ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``, as torchrun sets them.
The rank named by ``--slow-rank`` reads samples that each take ``--latency-ms`` to fetch
(``num_workers=0``: a remote store, a slow database); the others read an in-memory tensor.
DDP's gradient all-reduce makes every rank step at the slow rank's pace, so the fast ranks spend
their steps waiting inside ``backward`` for it: the job is input-starved on one rank.
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist
from common import parser, report, train
from data_starved import FEATURES, SlowFetch
from ddp_network import any_rank_done
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset


def loader(slow: bool, latency_s: float, batch: int) -> DataLoader:
    if slow:
        return DataLoader(SlowFetch(1_000_000, latency_s), batch_size=batch, num_workers=0)
    data = TensorDataset(torch.randn(4096, FEATURES), torch.randint(0, 10, (4096,)))
    return DataLoader(data, batch_size=batch, shuffle=True, num_workers=0)


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--slow-rank", type=int, default=1)
    args.add_argument("--latency-ms", type=float, default=8.0, help="fetch time per sample")
    args.add_argument("--batch", type=int, default=8)
    opts = args.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    slow = dist.get_rank() == opts.slow_rank
    model = DistributedDataParallel(
        torch.nn.Sequential(
            torch.nn.Linear(FEATURES, FEATURES), torch.nn.ReLU(), torch.nn.Linear(FEATURES, 10)
        )
    )
    started = time.monotonic()
    try:
        data = loader(slow, opts.latency_ms / 1000, opts.batch)
        steps = train(data, model, opts.seconds, agree=any_rank_done)
        report(f"straggler rank {dist.get_rank()} slow={slow}", steps, started)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
