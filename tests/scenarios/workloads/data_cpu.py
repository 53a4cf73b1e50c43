"""`data_cpu`: CPU-heavy augmentation in two DataLoader workers starves a cheap model.

Each sample is a synthetic 3x128x128 image pushed through repeated blurs and an FFT-domain
jitter, tens of milliseconds of single-threaded CPU per image; the model is one linear layer.
With two workers on two cores the workers are pegged and the trainer waits for every batch.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from common import parser, report, train
from torch.utils.data import DataLoader, Dataset

IMAGE = 128
POOLED = 16


class AugmentedImages(Dataset):
    """Deterministic images through an expensive augmentation pipeline."""

    def __init__(self, length: int, rounds: int) -> None:
        self.length = length
        self.rounds = rounds
        self.kernel = torch.full((3, 1, 5, 5), 1.0 / 25)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(1, 3, IMAGE, IMAGE, generator=generator)
        for _ in range(self.rounds):
            image = F.conv2d(image, self.kernel, padding=2, groups=3)
            spectrum = torch.fft.rfft2(image)
            jitter = 1 + 0.01 * torch.rand(spectrum.shape, generator=generator)
            image = torch.fft.irfft2(spectrum * jitter, s=image.shape[-2:])
        pooled = F.adaptive_avg_pool2d(image, POOLED).flatten()
        return pooled, index % 10


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--rounds", type=int, default=24, help="augmentation rounds per image")
    opts = args.parse_args()
    torch.set_num_threads(1)
    loader = DataLoader(AugmentedImages(1_000_000, opts.rounds), batch_size=16, num_workers=2)
    model = torch.nn.Linear(3 * POOLED * POOLED, 10)
    started = time.monotonic()
    report("data_cpu", train(loader, model, opts.seconds), started)


if __name__ == "__main__":
    main()
