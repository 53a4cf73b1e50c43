"""`data_starved`: a latency-bound loader with no workers feeds a cheap model.

Every ``__getitem__`` sleeps (a remote fetch, a slow database) and uses almost no CPU, and
``num_workers=0`` makes the training process wait for each sample in turn.
"""

from __future__ import annotations

import time

import torch
from common import parser, report, train
from torch.utils.data import DataLoader, Dataset

FEATURES = 256


class SlowFetch(Dataset):
    """Samples that each take ``latency_s`` of waiting and almost no compute."""

    def __init__(self, length: int, latency_s: float) -> None:
        self.length = length
        self.latency_s = latency_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.latency_s)
        return torch.full((FEATURES,), float(index % 7)), index % 10


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--latency-ms", type=float, default=20.0, help="wait per sample")
    opts = args.parse_args()
    torch.set_num_threads(1)
    loader = DataLoader(SlowFetch(1_000_000, opts.latency_ms / 1000), batch_size=8, num_workers=0)
    model = torch.nn.Linear(FEATURES, 10)
    started = time.monotonic()
    report("data_starved", train(loader, model, opts.seconds), started)


if __name__ == "__main__":
    main()
