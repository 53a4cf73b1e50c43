"""`throttled_disk`: DataLoader workers reading 1 MiB samples through the page cache from a
disk whose reads are throttled (the harness caps the device at 8 MB/s for this process).

Plain buffered ``open().read()``, one sample per file, as most image and audio datasets are
read: no ``O_DIRECT``.  The dataset is larger than what a run can read, so no sample is read
twice and every read goes to the slow device; the workers spend their time blocked in it.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from common import parser, report, train
from data_io import FEATURES, FileSamples
from torch.utils.data import DataLoader


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--data-dir", type=Path, required=True, help="directory of *.bin files")
    args.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    args.add_argument("--batch", type=int, default=4)
    opts = args.parse_args()
    torch.set_num_threads(1)
    loader = DataLoader(
        FileSamples(opts.data_dir, Path.read_bytes),
        batch_size=opts.batch,
        shuffle=True,
        num_workers=opts.workers,
    )
    model = torch.nn.Linear(FEATURES, 10)
    started = time.monotonic()
    report("throttled_disk", train(loader, model, opts.seconds), started)


if __name__ == "__main__":
    main()
