"""`host_memory`: DataLoader workers copy a dataset held as Python objects, page by page.

The dataset is a plain list of samples, each a list of Python floats, as a user who loads a
CSV or JSON into memory has it.  The trainer builds it, then forks persistent DataLoader
workers that share every page of it.  Reading a sample in a worker touches each of its floats'
reference counts, and the kernel copies every page so written into that worker (copy on write,
here on read): each worker's unique memory grows by the samples it fetches, epoch after epoch,
toward a copy of the whole dataset per worker.  Inside a memory cgroup the job reaches its
limit and the OOM killer ends it.  ``--sample-ms`` paces the fetches (a fixed per-sample cost)
so that the growth is steady; ``--numpy`` holds the same data as one numpy array instead (the
remedy: nothing for the workers to copy), the healthy control.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from common import parser, report, train
from torch.utils.data import DataLoader, Dataset


class PythonObjects(Dataset):
    """``samples`` lists of ``floats`` Python floats each: 32 bytes a float, counted and copied."""

    def __init__(self, samples: int, floats: int, sample_s: float) -> None:
        self.items = [[float(i * floats + j) for j in range(floats)] for i in range(samples)]
        self.sample_s = sample_s

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.sample_s:
            time.sleep(self.sample_s)
        return torch.tensor(self.items[index][:64]) + sum(self.items[index]) * 0, index % 10


class NumpyArray(PythonObjects):
    """The same data in one float64 array: reading a row writes no page."""

    def __init__(self, samples: int, floats: int, sample_s: float) -> None:
        self.items = np.arange(samples * floats, dtype=np.float64).reshape(samples, floats)
        self.sample_s = sample_s

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.sample_s:
            time.sleep(self.sample_s)
        row = self.items[index]
        return torch.from_numpy(row[:64].copy()) + float(row.sum()) * 0, index % 10


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--samples", type=int, default=9600)
    args.add_argument("--floats", type=int, default=1000, help="Python floats per sample")
    args.add_argument("--workers", type=int, default=3)
    args.add_argument("--sample-ms", type=float, default=10.0, help="per-sample fetch time")
    args.add_argument("--numpy", action="store_true", help="hold the data as one numpy array")
    opts = args.parse_args()
    torch.set_num_threads(1)
    kind = NumpyArray if opts.numpy else PythonObjects
    started = time.monotonic()
    data = kind(opts.samples, opts.floats, opts.sample_ms / 1000)
    loader = DataLoader(data, batch_size=16, shuffle=True, num_workers=opts.workers,
                        persistent_workers=True)  # fmt: skip
    model = torch.nn.Linear(64, 10)
    print(f"object_dataset: built in {time.monotonic() - started:.1f} s", flush=True)
    started = time.monotonic()
    report("object_dataset", train(loader, model, opts.seconds), started)


if __name__ == "__main__":
    main()
