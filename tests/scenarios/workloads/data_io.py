"""`data_io`: a loader reading real files from a read-throttled disk, page cache bypassed.

Each sample is one whole file read with ``O_DIRECT`` into a page-aligned buffer, so every
epoch goes back to the device; the harness caps the device's read bandwidth for this process
(cgroup blkio), and the model is cheap.  Workers spend their time blocked on reads, not on CPU.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
from common import parser, report, train
from torch.utils.data import DataLoader, Dataset

FEATURES = 256


def read_direct(path: Path) -> bytes:
    """The whole file through O_DIRECT (no page cache): aligned buffer, aligned length."""
    size = path.stat().st_size
    aligned = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
    buffer = mmap.mmap(-1, aligned)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        got = os.readv(fd, [buffer])
    finally:
        os.close(fd)
    return buffer[:got]


class FileSamples(Dataset):
    """One sample per file: the raw bytes (as ``read`` reads them), reduced to a feature
    vector."""

    def __init__(self, root: Path, read: Callable[[Path], bytes] = read_direct) -> None:
        self.files = sorted(root.glob("*.bin"))
        self.read = read
        if not self.files:
            raise SystemExit(f"no *.bin files under {root}")

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        raw = torch.frombuffer(bytearray(self.read(self.files[index])), dtype=torch.uint8)
        features = raw[: FEATURES * (raw.numel() // FEATURES)].view(FEATURES, -1)
        return features[:, 0].float() / 255, index % 10


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--data-dir", type=Path, required=True, help="directory of *.bin files")
    args.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    opts = args.parse_args()
    torch.set_num_threads(1)
    data = FileSamples(opts.data_dir)
    loader = DataLoader(data, batch_size=2, shuffle=True, num_workers=opts.workers)
    model = torch.nn.Linear(FEATURES, 10)
    started = time.monotonic()
    report("data_io", train(loader, model, opts.seconds), started)


if __name__ == "__main__":
    main()
