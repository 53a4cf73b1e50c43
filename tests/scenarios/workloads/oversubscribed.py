"""`oversubscribed`: one of several trainers that each ask for more threads than the machine has.

The harness starts several copies at once; each sets ``torch.set_num_threads`` to 4 or more on a
two-core machine, so the OpenMP threads of all of them fight over the same cores.
"""

from __future__ import annotations

import time

import torch
from common import parser, report, train
from compute import FEATURES, wide_mlp
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--threads", type=int, default=4, help="torch intra-op threads")
    opts = args.parse_args()
    torch.set_num_threads(opts.threads)
    data = TensorDataset(torch.randn(2048, FEATURES), torch.randint(0, 10, (2048,)))
    loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=0)
    started = time.monotonic()
    report("oversubscribed", train(loader, wide_mlp(), opts.seconds), started)


if __name__ == "__main__":
    main()
