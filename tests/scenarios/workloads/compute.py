"""`compute`: a wide MLP on in-memory data; the model's math is the whole step.

The dataset is one pre-built tensor, so fetching a batch is a slice; the 4096-wide hidden
layers make forward and backward take tens of milliseconds on two threads.
"""

from __future__ import annotations

import time

import torch
from common import mlp, parser, report, train
from torch.utils.data import DataLoader, TensorDataset

FEATURES = 1024
HIDDEN = 4096


def wide_mlp() -> torch.nn.Module:
    """Three wide layers: about 21 M parameters, all dense matmuls."""
    return mlp(FEATURES, HIDDEN)


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    opts = args.parse_args()
    torch.set_num_threads(opts.threads)
    data = TensorDataset(torch.randn(4096, FEATURES), torch.randint(0, 10, (4096,)))
    loader = DataLoader(data, batch_size=128, shuffle=True, num_workers=0)
    started = time.monotonic()
    report("compute", train(loader, wide_mlp(), opts.seconds), started)


if __name__ == "__main__":
    main()
