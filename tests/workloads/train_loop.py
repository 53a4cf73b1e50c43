"""An ordinary PyTorch training script with no traintop in it: the tests run it under the shim.

Seeded and single-threaded, so two runs print the same final loss bit for bit.
"""

import argparse
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    """Regression samples that take a millisecond each, like a dataset doing real work."""

    def __init__(self, n: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 16, generator=generator)
        self.y = self.x.sum(dim=1, keepdim=True)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):
        time.sleep(0.001)
        return self.x[index], self.y[index]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--start-method", default="fork")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    context = args.start_method if args.workers else None
    loader = DataLoader(
        SlowDataset(256),
        batch_size=16,
        shuffle=True,
        num_workers=args.workers,
        multiprocessing_context=context,
        generator=torch.Generator().manual_seed(1),
    )
    steps = 0
    for _epoch in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            steps += 1
    print(f"steps={steps} final_loss={loss.item()!r}")
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
