"""A training script instrumented by hand through the explicit ``traintop.attach()`` API."""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

import traintop


def main() -> int:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    probe = traintop.attach(name="explicit-job")
    x = torch.randn(96, 8)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=12)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for x_batch, y_batch in probe.loader(loader):
        with probe.phase("forward"):
            loss = torch.nn.functional.mse_loss(model(x_batch), y_batch)
        with probe.phase("backward"):
            loss.backward()
        with probe.phase("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
        with probe.phase("logging"):
            float(loss)
        probe.step()
    print(f"final_loss={loss.item()!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
