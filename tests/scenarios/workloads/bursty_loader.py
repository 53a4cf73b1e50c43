"""`bursty_loader`: DataLoader workers that each need longer for a batch than the step takes.

Every sample costs a fixed ``--fetch-ms`` of waiting (a remote object store, a slow database),
almost no CPU.  With ``--workers`` workers and ``--batch`` samples a batch, each worker needs
``batch x fetch`` per batch (16 x 30 ms = 0.48 s) while the model steps in a few ms: the workers
finish their batches at about the same moment, so batches arrive ``workers`` at a time.  The
trainer consumes a burst in a few short steps, then waits about ``batch x fetch`` for the next:
half of the steps (with 2 workers) are long, and all of their excess is the wait for data.
"""

from __future__ import annotations

import time

import torch
from common import parser, report, train
from data_starved import FEATURES, SlowFetch
from torch.utils.data import DataLoader


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    args.add_argument("--fetch-ms", type=float, default=30.0, help="wait per sample")
    args.add_argument("--batch", type=int, default=16)
    opts = args.parse_args()
    torch.set_num_threads(1)
    data = SlowFetch(1_000_000, opts.fetch_ms / 1000)
    loader = DataLoader(data, batch_size=opts.batch, num_workers=opts.workers)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    started = time.monotonic()
    report(f"bursty_loader {opts.workers} workers", train(loader, model, opts.seconds), started)


if __name__ == "__main__":
    main()
