"""A small real PyTorch training job with a chosen bottleneck, to try traintop without a GPU.

``python -m traintop.demo_job --bottleneck data|io|compute|none --seconds N``

* data: CPU-heavy augmentation in 2 DataLoader workers, so the loop mostly waits for batches;
* io: samples read from files written to a temp dir, each read after dropping the page cache for
  that file (posix_fadvise DONTNEED) plus a short sleep, like slow network storage;
* compute: a wide MLP fed from in-memory tensors;
* none: a balanced mix.

Synthetic data is made at run time, nothing is downloaded.  The job is instrumented through the
public ``traintop.attach()`` API, the same code path users take.  It stops after ``--seconds`` or
on SIGTERM/SIGINT, finishing the current step and exiting 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import traintop

FEATURES = 64
SAMPLES = 1024


@dataclass(frozen=True)
class Profile:
    """How one bottleneck is built: model width, batch, loader workers, per-sample cost."""

    hidden: int
    layers: int
    batch_size: int
    workers: int
    augment_rounds: int
    read_delay_s: float


PROFILES = {
    "data": Profile(hidden=64, layers=2, batch_size=32, workers=2, augment_rounds=60,
                    read_delay_s=0.0),
    "io": Profile(hidden=64, layers=2, batch_size=32, workers=2, augment_rounds=0,
                  read_delay_s=0.002),
    "compute": Profile(hidden=1024, layers=4, batch_size=64, workers=0, augment_rounds=0,
                       read_delay_s=0.0),
    "none": Profile(hidden=512, layers=3, batch_size=32, workers=2, augment_rounds=3,
                    read_delay_s=0.0),
}  # fmt: skip


class _Stop:
    """Set by SIGTERM/SIGINT; the loop checks it between steps."""

    requested = False

    @classmethod
    def handler(cls, _signum: int, _frame: FrameType | None) -> None:
        cls.requested = True


def make_dataset(torch, profile: Profile, workdir: str) -> Any:
    """Synthetic regression data; with a read delay, one .pt file per sample on disk.  Map-style
    by duck typing (so Any): torch is imported late, and the classes cannot subclass Dataset."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES, generator=generator)
    y = torch.tanh(x[:, :8].sum(dim=1, keepdim=True))
    if profile.read_delay_s:
        return _FileDataset(torch, x, y, workdir, profile.read_delay_s)
    return _MemoryDataset(torch, x, y, profile.augment_rounds)


class _MemoryDataset:
    def __init__(self, torch, x, y, augment_rounds: int) -> None:
        self.torch, self.x, self.y, self.rounds = torch, x, y, augment_rounds

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):
        sample = self.x[index]
        for _ in range(self.rounds):  # "augmentation": small ops with real CPU cost
            sample = self.torch.roll(sample, 1) * 0.999 + self.torch.sin(sample) * 0.001
            sample = self.torch.fft.irfft(self.torch.fft.rfft(sample), n=FEATURES)
        return sample, self.y[index]


class _FileDataset:
    """Each read first evicts the file from the page cache so it really hits storage."""

    def __init__(self, torch, x, y, workdir: str, delay_s: float) -> None:
        self.delay_s, self.torch, self.paths = delay_s, torch, []
        for i in range(len(x)):
            path = os.path.join(workdir, f"sample-{i:05d}.bin")
            with open(path, "wb") as f:
                f.write(x[i].numpy().tobytes() + y[i].numpy().tobytes())
            self.paths.append(path)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        fd = os.open(self.paths[index], os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            data = bytearray(os.read(fd, (FEATURES + 1) * 4))
        finally:
            os.close(fd)
        time.sleep(self.delay_s)  # storage latency
        values = self.torch.frombuffer(data, dtype=self.torch.float32)
        return values[:FEATURES].clone(), values[FEATURES:].clone()


def build_model(torch, profile: Profile):
    layers, width = [], FEATURES
    for _ in range(profile.layers):
        layers += [torch.nn.Linear(width, profile.hidden), torch.nn.ReLU()]
        width = profile.hidden
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))


def train(bottleneck: str, seconds: float, workdir: str) -> tuple[int, float]:
    """Run epochs until the deadline or a stop signal; returns (steps, last loss)."""
    import torch

    profile = PROFILES[bottleneck]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = build_model(torch, profile)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(
        make_dataset(torch, profile, workdir), batch_size=profile.batch_size, shuffle=True,
        num_workers=profile.workers, persistent_workers=profile.workers > 0,
    )  # fmt: skip
    probe = traintop.attach(name=f"demo-{bottleneck}")
    batches = probe.loader(loader)
    deadline, steps, loss = time.monotonic() + seconds, 0, float("nan")
    while not _Stop.requested and time.monotonic() < deadline:
        for x, y in batches:
            loss = _train_step(torch, probe, model, optimizer, x, y)
            steps += 1
            if _Stop.requested or time.monotonic() >= deadline:
                break
    return steps, loss


def _train_step(torch, probe, model, optimizer, x, y) -> float:
    with probe.phase("forward"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    with probe.phase("backward"):
        loss.backward()
    with probe.phase("optimizer"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    probe.step()
    return loss.item()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m traintop.demo_job", description=(__doc__ or "")
                                     .split("\n")[0])  # fmt: skip
    parser.add_argument("--bottleneck", choices=sorted(PROFILES), default="none")
    parser.add_argument("--seconds", type=float, default=60.0, help="run time (default 60)")
    args = parser.parse_args(argv)
    if not 0 < args.seconds < 1e7:
        parser.error("--seconds must be a positive number")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _Stop.handler)
    signal.signal(signal.SIGINT, _Stop.handler)
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="traintop-demo-") as workdir:
            steps, loss = train(args.bottleneck, args.seconds, workdir)
    except ImportError as exc:
        print(f"demo_job: PyTorch is required ({exc})", file=sys.stderr)
        return 1
    elapsed = time.monotonic() - started
    print(f"demo_job: {args.bottleneck}: {steps} steps in {elapsed:.1f} s, last loss {loss:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
