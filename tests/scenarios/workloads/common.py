"""What every scenario workload shares: a bounded, ordinary PyTorch training loop.

The workloads are plain training scripts a user could have written (a DataLoader, a model, an
optimizer), so `traintop run` instruments them with no code change.  Each one stops by itself
after ``--seconds`` so that a process the harness failed to kill cannot linger for long.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable

import torch

DEFAULT_SECONDS = 35.0


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the ``--seconds`` bound every workload honours."""
    args = argparse.ArgumentParser(description=description)
    args.add_argument("--seconds", type=float, default=DEFAULT_SECONDS, help="stop after N s")
    return args


def mlp(features: int, hidden: int) -> torch.nn.Module:
    """Two hidden ReLU layers and a 10-class head: all dense matmuls, sized by the caller."""
    return torch.nn.Sequential(
        torch.nn.Linear(features, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10),
    )


def train(
    loader: Iterable,
    model: torch.nn.Module,
    seconds: float,
    after_step: Callable[[int], None] | None = None,
    agree: Callable[[bool], bool] | None = None,
) -> int:
    """Train until ``seconds`` pass, re-iterating the loader per epoch; returns the step count.

    ``agree`` turns this process's "my time is up" into a decision shared by all ranks, so
    distributed ranks stop at the same step instead of one waiting forever on the other.
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    deadline = time.monotonic() + seconds
    agree = agree or bool
    step = 0
    while True:
        for inputs, labels in loader:
            loss = loss_fn(model(inputs), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if after_step is not None:
                after_step(step)
            if agree(time.monotonic() >= deadline):
                return step


def report(name: str, steps: int, started: float) -> None:
    """One line in the workload log, read by people debugging a failed scenario."""
    elapsed = time.monotonic() - started
    print(f"{name}: {steps} steps in {elapsed:.1f} s ({steps / elapsed:.2f} steps/s)", flush=True)
