"""Gradient accumulation x4: four DataLoader micro-batches, each with its own backward, per
``optimizer.step()``; the loss is scaled by 1/4 as usual."""

import os

import torch
from loop_clock import LoopClock
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

MICRO, ACCUM = 8, 4


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(8192, 128), torch.randint(0, 10, (8192,)))
    loader = DataLoader(data, batch_size=MICRO, shuffle=True, drop_last=True)
    model = nn.Sequential(nn.Linear(128, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10))  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    clock = LoopClock(float(os.environ.get("LOOP_SECONDS", "4")))
    batches = iter(loader)
    while clock.running():
        for _ in range(ACCUM):
            clock.mark("data")
            batch = next(batches, None)
            if batch is None:
                batches = iter(loader)
                batch = next(batches)
            x, y = batch
            clock.mark("forward")
            loss = nn.functional.cross_entropy(model(x), y) / ACCUM
            clock.mark("backward")
            loss.backward()
        clock.mark("optimizer")
        optimizer.step()
        optimizer.zero_grad()
    clock.report(batch=MICRO * ACCUM)
    print(f"iterations={len(clock.starts)} loss={loss.item():.4f}")


if __name__ == "__main__":
    main()
