"""Full-batch regression with ``torch.optim.LBFGS``: ``optimizer.step(closure)`` runs the forward
and backward passes (several times per step) inside the closure; no DataLoader."""

import os

import torch
from loop_clock import LoopClock
from torch import nn

ROWS = 256


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(ROWS, 64)
    y = torch.sin(x @ torch.randn(64, 1))
    model = nn.Sequential(nn.Linear(64, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(),
                          nn.Linear(512, 1))  # fmt: skip
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4, history_size=8)
    clock = LoopClock(float(os.environ.get("LOOP_SECONDS", "4")))
    evaluations = 0

    def closure():
        nonlocal evaluations
        evaluations += 1
        clock.mark("forward")
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        clock.mark("backward")
        loss.backward()
        clock.mark("optimizer")
        return loss

    while clock.running():
        clock.mark("optimizer")
        loss = optimizer.step(closure)
    clock.report(batch=ROWS, evaluations=evaluations)
    print(f"iterations={len(clock.starts)} loss={loss.item():.4f}")


if __name__ == "__main__":
    main()
