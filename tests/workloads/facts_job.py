"""A training script whose knobs the tests choose, so the probe's facts can be checked against
what the script really does (tests/test_job_facts.py).  No traintop in it.

``--fake-cuda`` makes CPU torch look like a CUDA job that has initialised CUDA, with a sync
debug mode that behaves as torch's: once set to "warn", ``scalar.item()`` and ``.cpu()`` raise
torch's own warning text from C (no Python frame of their own, so the warning is attributed to
the calling line, as torch's is); ``torch.cuda.synchronize()`` and ``Event.synchronize()`` do
nothing, as the debug mode does not see them.  ``--strict-warnings`` turns every warning into an
error from inside the script, and syncs inside pytest-style ``catch_warnings`` blocks.
"""

import argparse
import functools
import sys
import time
import warnings

import torch
from torch.utils.data import DataLoader, TensorDataset

SYNC_TEXT = "called a synchronizing CUDA operation"
TRIGGERED = " (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:186.)"


def fake_cuda() -> type:
    """Patch torch.cuda into a CUDA job's; returns the class of a "CUDA scalar"."""
    state = {"mode": 0}
    warn = functools.partial(warnings.warn, SYNC_TEXT + TRIGGERED, UserWarning, 1)

    class Scalar:
        """``.item()`` and ``.cpu()`` sync (C callables: the caller's line is the warning's)."""

        item = property(lambda self: warn if state["mode"] == 1 else int)
        cpu = item

    class Event:
        """Completes at once; traintop's own GPU timer (traintop/cuda_timing.py) reads it too."""

        def __init__(self, enable_timing: bool = False) -> None:
            self.timing = enable_timing

        def record(self) -> None:
            return None

        def query(self) -> bool:
            return True

        def elapsed_time(self, _end: "Event") -> float:
            return 1.0

        def synchronize(self) -> None:
            return None

    cuda = torch.cuda
    cuda.is_initialized = lambda: True
    cuda.set_sync_debug_mode = lambda mode: state.update(
        mode={"default": 0, "warn": 1, "error": 2}.get(mode, mode)
    )
    cuda.get_sync_debug_mode = lambda: state["mode"]
    cuda.synchronize = lambda device=None: None
    cuda.Event = Event
    cuda.device_count = lambda: 1
    cuda.memory_stats = lambda device=None: {"num_alloc_retries": 3}
    cuda.memory_allocated = lambda device=None: 0
    cuda.is_current_stream_capturing = lambda: False
    return Scalar


def model_of(args: argparse.Namespace) -> torch.nn.Module:
    if args.model == "conv":
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(8, 1),
        )
        return model.to(memory_format=torch.channels_last) if args.channels_last else model
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def optimizers_of(args: argparse.Namespace, model: torch.nn.Module) -> list:
    params = list(model.parameters())
    if args.optimizers == "adamw-fused":
        return [torch.optim.AdamW(params, lr=1e-3, fused=True)]
    if args.optimizers == "two":  # a GAN-like pair: one foreach, one plain
        half = len(params) // 2
        return [
            torch.optim.SGD(params[:half], lr=0.01, foreach=True),
            torch.optim.Adam(params[half:], lr=1e-3, foreach=False),
        ]
    return [torch.optim.SGD(params, lr=0.01)]


def batches(args: argparse.Namespace):
    shape = (3, 8, 8) if args.model == "conv" else (16,)
    x, y = torch.randn(64, *shape), torch.randn(64, 1)
    if args.loader:
        loader = DataLoader(
            TensorDataset(x, y),
            batch_size=16,
            num_workers=2,
            persistent_workers=True,
            prefetch_factor=3,
        )
        while True:
            yield from loader
    while True:
        yield x[:16], y[:16]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["mlp", "conv"], default="mlp")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--autocast", choices=["off", "bf16"], default="off")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--loader", action="store_true")
    parser.add_argument("--optimizers", choices=["sgd", "adamw-fused", "two"], default="sgd")
    parser.add_argument("--fake-cuda", action="store_true")
    parser.add_argument("--strict-warnings", action="store_true")
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    scalar = fake_cuda()() if args.fake_cuda else None
    model = model_of(args)
    run = torch.compile(model, backend="eager") if args.compile else model
    optimizers = optimizers_of(args, model)
    mine: list[str] = []
    warnings.showwarning = lambda message, *rest: mine.append(str(message))
    deadline, steps = time.monotonic() + args.seconds, 0
    for x, y in batches(args):
        if args.strict_warnings and steps == 20:
            warnings.simplefilter("error")
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            loss = torch.nn.functional.mse_loss(run(x).float(), y)
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
        if scalar is not None:
            sync_twice(scalar, steps, args.strict_warnings)
        steps += 1
        time.sleep(0.005)
        if time.monotonic() > deadline:
            break
    try:  # the user's own warnings still go through their filters and their showwarning
        warnings.warn("a warning of the script's own", stacklevel=1)
    except UserWarning as exc:
        mine.append(f"raised: {exc}")
    print(f"steps={steps} own_warnings={mine}")
    return 0


def sync_twice(scalar, steps: int, strict: bool) -> None:
    """Two ``.item()`` a step on one line, ``synchronize()`` every other step, ``Event`` every
    fourth; under --strict-warnings some inside pytest's way of catching warnings."""
    if strict and steps % 3 == 0:
        with warnings.catch_warnings(record=True) as log:
            warnings.filterwarnings("always", category=DeprecationWarning)
            warnings.filterwarnings("error")
            value = (scalar.item(), scalar.item())
        assert not log, log  # a sync never reaches the user's catcher
    else:
        value = (scalar.item(), scalar.item())
    if steps % 2 == 0:
        torch.cuda.synchronize()
    if steps % 4 == 0:
        torch.cuda.Event().synchronize()
    if strict and steps == 30:
        warnings.resetwarnings()
        warnings.simplefilter("error")
    return value


if __name__ == "__main__":
    sys.exit(main())
