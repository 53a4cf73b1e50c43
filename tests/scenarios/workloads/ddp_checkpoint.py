"""`checkpoint_barrier`: rank 0 writes a slow checkpoint now and then; the others wait for it.

Three gloo DDP ranks train a small model on in-memory data (a few ms a step).  Every
``--every`` steps rank 0 saves the model to a slow destination (a shared filesystem that takes
``--save-s`` seconds for the write), while ranks 1 and 2 wait for it in ``dist.barrier()``, as
the tutorials' checkpointing code has them.  Between checkpoints the job is healthy: nothing is
slow on the link.  A wait in a collective for a peer that is busy elsewhere is not the network.
"""

from __future__ import annotations

import io
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from common import parser, report, train
from ddp_network import any_rank_done
from ddp_slow_rank import FEATURES
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset


class SlowStorage(io.BytesIO):
    """A checkpoint destination whose first write takes ``seconds``: a slow shared filesystem."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if self.seconds > 0:
            time.sleep(self.seconds)
            self.seconds = 0
        return super().write(data)


def save_checkpoint(model: torch.nn.Module, seconds: float) -> None:
    torch.save(model.state_dict(), SlowStorage(seconds))


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--every", type=int, default=600, help="steps between checkpoints")
    args.add_argument("--save-s", type=float, default=14.0, help="how long a checkpoint takes")
    opts = args.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    layers = (torch.nn.Linear(FEATURES, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    model = DistributedDataParallel(torch.nn.Sequential(*layers))
    data = TensorDataset(torch.randn(2048, FEATURES), torch.randint(0, 10, (2048,)))
    loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=0)

    def checkpoint(step: int) -> None:
        if step % opts.every == 0:
            if rank == 0:
                print(f"checkpoint start {time.monotonic():.3f}", flush=True)
                save_checkpoint(model.module, opts.save_s)
            dist.barrier()

    started = time.monotonic()
    try:
        steps = train(loader, model, opts.seconds, after_step=checkpoint, agree=any_rank_done)
        report(f"checkpoint rank {rank}", steps, started)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
