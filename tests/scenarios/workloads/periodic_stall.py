"""`periodic_stall`: a healthy loop that writes a large checkpoint with fsync every N steps.

The model carries a big frozen embedding table (a pretrained vocabulary), so every checkpoint
is a couple of hundred megabytes; ``torch.save`` plus ``fsync`` blocks the loop for a long
step while the regular steps in between stay short.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from common import parser, report, train
from torch.utils.data import DataLoader, TensorDataset

VOCAB = 400_000
DIM = 128
HIDDEN = 1024


class Tagger(torch.nn.Module):
    """Frozen embedding lookup followed by a trainable MLP head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.embed.weight.requires_grad_(False)
        self.head = torch.nn.Sequential(
            torch.nn.Linear(DIM, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 10)
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens).mean(dim=1))


def checkpointer(model: torch.nn.Module, path: Path, every: int):
    """An after-step hook that saves and fsyncs the whole model every ``every`` steps."""

    def after_step(step: int) -> None:
        if step % every:
            return
        with open(path, "wb") as out:
            torch.save(model.state_dict(), out)
            out.flush()
            os.fsync(out.fileno())

    return after_step


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--ckpt-dir", type=Path, required=True, help="where checkpoints go")
    args.add_argument("--every", type=int, default=25, help="checkpoint every N steps")
    opts = args.parse_args()
    torch.set_num_threads(1)
    tokens = torch.randint(0, VOCAB, (8192, 32))
    data = TensorDataset(tokens, torch.randint(0, 10, (8192,)))
    loader = DataLoader(data, batch_size=256, shuffle=True, num_workers=0)
    model = Tagger()
    save = checkpointer(model, opts.ckpt_dir / "checkpoint.pt", opts.every)
    started = time.monotonic()
    report("periodic_stall", train(loader, model, opts.seconds, save), started)


if __name__ == "__main__":
    main()
