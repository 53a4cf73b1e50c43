"""PyTorch Lightning, DDP on the CPU with 2 processes started by Lightning's own launcher (it
re-runs this script for rank 1 with LOCAL_RANK/WORLD_SIZE but no RANK), automatic optimization
(``optimizer.step(closure)``: the forward pass runs inside the closure).

The reference phases are timed from Lightning's own hooks.
"""

import os

import lightning as L
import torch
from loop_clock import LoopClock
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

BATCH = 16


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024),
                                 nn.ReLU(), nn.Linear(1024, 1))  # fmt: skip
        self.clock = LoopClock(float("inf"))

    def training_step(self, batch, _index):
        self.clock.mark("forward")
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def on_train_batch_start(self, _batch, _index):
        self.clock.running()
        self.clock.mark("other")

    def on_before_backward(self, _loss):
        self.clock.mark("backward")

    def on_after_backward(self):
        self.clock.mark("other")

    def on_before_optimizer_step(self, _optimizer):
        self.clock.mark("optimizer")

    def optimizer_step(self, *args, **kwargs):
        super().optimizer_step(*args, **kwargs)
        self.clock.mark("other")  # the update is done; Lightning's bookkeeping follows

    def on_train_end(self):
        self.clock.report(rank=self.global_rank, batch=BATCH, local_rank=self.local_rank,
                          world_size=self.trainer.world_size)  # fmt: skip

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        data = TensorDataset(torch.randn(65536, 64), torch.randn(65536, 1))
        return DataLoader(data, batch_size=BATCH)


def main() -> None:
    torch.set_num_threads(1)
    L.seed_everything(0, verbose=False)
    seconds = int(os.environ.get("LOOP_SECONDS", "4"))
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1,
                        max_time={"seconds": seconds}, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(Regressor())


if __name__ == "__main__":
    main()
