"""A latency-bound input pipeline: each sample waits 4 ms (a remote read), the model is tiny.

With ``--workers 0`` the trainer waits for every sample in turn; with N workers the waits of
N batches overlap, so steps/s scales with N even on a busy 2-core machine (sleeping needs no
CPU).  Workers persist across the single epoch, so start-up happens once.
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class RemoteDataset(Dataset):
    def __init__(self, n: int) -> None:
        self.x = torch.randn(n, 8, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):
        time.sleep(0.004)
        return self.x[index], self.x[index].sum(dim=0, keepdim=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(RemoteDataset(args.steps * 8), batch_size=8, num_workers=args.workers,
                        persistent_workers=args.workers > 0)  # fmt: skip
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
