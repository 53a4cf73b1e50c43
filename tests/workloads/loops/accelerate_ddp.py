"""Hugging Face accelerate: 2 ranks on the CPU started by ``accelerate launch --multi_gpu``
(torchrun underneath: RANK/LOCAL_RANK/WORLD_SIZE, run id ``none``) with ACCELERATE_USE_CPU set.
``Accelerator()`` makes the gloo group and prepares the model (DDP), the optimizer and the
DataLoader (a shard per rank, fetched one batch ahead), and the loss goes backward through
``accelerator.backward``, as a user's script does.
"""

import os

import torch
from accelerate import Accelerator
from loop_clock import LoopClock
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

BATCH = 256  # per rank: steps of real work, 15-20/s on two shared CPU cores


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    accelerator = Accelerator()
    data = TensorDataset(torch.randn(65536, 64), torch.randn(65536, 1))
    model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 1))  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer,
                                                   DataLoader(data, batch_size=BATCH))  # fmt: skip
    accelerator.wait_for_everyone()  # the ranks start their first iteration together
    clock = LoopClock(float(os.environ.get("LOOP_SECONDS", "4")))
    batches = iter(loader)
    while True:
        go = torch.tensor([float(clock.running())])  # both ranks stop at the same iteration
        clock.mark("sync")
        if accelerator.reduce(go, reduction="sum").item() < accelerator.num_processes:
            break
        clock.mark("data")
        batch = next(batches, None)
        if batch is None:  # a new epoch: a fast machine runs through the data in the time
            batches = iter(loader)
            batch = next(batches)
        x, y = batch
        clock.mark("forward")
        loss = nn.functional.mse_loss(model(x), y)
        clock.mark("backward")
        accelerator.backward(loss)
        clock.mark("optimizer")
        optimizer.step()
        optimizer.zero_grad()
    clock.starts.pop()  # the last check was no iteration
    clock.report(rank=accelerator.process_index, batch=BATCH,
                 local_rank=accelerator.local_process_index,
                 world_size=accelerator.num_processes)  # fmt: skip
    accelerator.end_training()


if __name__ == "__main__":
    main()
