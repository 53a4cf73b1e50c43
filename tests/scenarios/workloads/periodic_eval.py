"""`periodic_stall`, evaluated in the loop: every N steps the model is run over a held-out set.

A healthy MLP whose training steps are short; the validation pass (its own DataLoader, the
model in eval mode under ``torch.no_grad``) sits inside the loop's after-step hook, so one
step in N is long.  What the pause is shows only on the stack: the model called from a second
place of the loop's code, not a checkpoint being written.
"""

from __future__ import annotations

import time

import torch
from common import mlp, parser, report, train
from torch.utils.data import DataLoader, TensorDataset

FEATURES, HIDDEN = 256, 512


def evaluator(model: torch.nn.Module, every: int):
    """An after-step hook that runs the model over a validation set every ``every`` steps."""
    rows = torch.randn(12_000, FEATURES)
    held_out = DataLoader(TensorDataset(rows, torch.randint(0, 10, (12_000,))), batch_size=500)
    loss_fn = torch.nn.CrossEntropyLoss()

    def after_step(step: int) -> None:
        if not every or step % every:
            return
        model.eval()
        with torch.no_grad():
            sum(loss_fn(model(inputs), labels).item() for inputs, labels in held_out)
        model.train()

    return after_step


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--every", type=int, default=60, help="validate every N steps (0: never)")
    opts = args.parse_args()
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(8192, FEATURES), torch.randint(0, 10, (8192,)))
    loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=0)
    model = mlp(FEATURES, HIDDEN)
    started = time.monotonic()
    steps = train(loader, model, opts.seconds, evaluator(model, opts.every))
    report("periodic_eval", steps, started)


if __name__ == "__main__":
    main()
