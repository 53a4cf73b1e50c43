"""`spawned_ddp`: a healthy two-rank gloo DDP job started by its own launcher, not torchrun.

Training frameworks (Lightning, Accelerate's notebook launcher, many research codebases) start
their ranks with ``torch.multiprocessing.spawn`` and a ``tcp://`` init method, leaving none of
torchrun's environment (no ``RANK``, no ``TORCHELASTIC_RUN_ID``).  Each rank trains a wide MLP
on an in-memory tensor with one thread: compute-bound, with a few MB of gradients that the
loopback all-reduce moves in a few milliseconds.
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from common import mlp, parser, report, train
from ddp_network import any_rank_done
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

FEATURES = 512
HIDDEN = 1024  # about 1.6 M parameters (6 MB of gradients), a few hundred MFLOP per batch


def rank_main(rank: int, world: int, init: str, seconds: float, batch: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    data = TensorDataset(torch.randn(4 * batch, FEATURES), torch.randint(0, 10, (4 * batch,)))
    loader = DataLoader(data, batch_size=batch, shuffle=True, num_workers=0)
    started = time.monotonic()
    try:
        model = DistributedDataParallel(mlp(FEATURES, HIDDEN))
        steps = train(loader, model, seconds, agree=any_rank_done)
        report(f"spawned rank {rank}", steps, started)
    finally:
        dist.destroy_process_group()


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--port", type=int, required=True)
    args.add_argument("--world", type=int, default=2)
    args.add_argument("--batch", type=int, default=256)
    opts = args.parse_args()
    init = f"tcp://127.0.0.1:{opts.port}"
    mp.spawn(rank_main, args=(opts.world, init, opts.seconds, opts.batch), nprocs=opts.world)


if __name__ == "__main__":
    main()
