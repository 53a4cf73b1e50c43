"""A synthetic training job whose costs are known, for the prediction trial (trial.py).

A plain PyTorch loop (a DataLoader, a module, an optimizer) that `traintop run` instruments with
no code change, every cost set on the command line so that a case states what it spends:

* per sample, in the DataLoader workers (or the trainer, with ``--workers 0``): ``--sample-cpu-ms``
  of CPU time (counted on the thread's CPU clock, so contention stretches it in wall time as it
  would a real decode), ``--sample-wait-ms`` of sleep (a remote fetch), one file read from
  ``--data-dir`` (storage);
* per step, in the module's forward: ``--step-cpu-ms`` of CPU time, ``--step-wait-ms`` of sleep
  (a device computing while the host waits), ``--matmul N`` products of 256x256 matrices on
  ``--threads`` intra-op threads (work that threads share);
* every ``--pause-every`` steps, a pause of ``--pause-ms``: sleep, CPU, or a file written and
  fsynced (a checkpoint); or (``--pause-kind eval``) an evaluation pass: ``--eval-batches``
  batches of the same samples loaded in the trainer (a second DataLoader, no workers) and run
  through the model under ``no_grad``;
* under ``RANK``/``WORLD_SIZE`` (torchrun's variables), a gloo DDP job: rank ``--slow-rank``
  spends ``--slow-ms`` more per step in its forward, off the CPU;
* ``--autocast bf16``: every forward in bf16 autocast on the CPU.

It stops by itself after ``--seconds``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

# the scenario workloads' plain training loop (a user's script as traintop sees it)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "scenarios" / "workloads"))
from common import report, train

FEATURES = 64
MATRIX = 256


def burn(ms: float) -> None:
    """Spend ``ms`` of this thread's CPU time (however long the scheduler makes that take)."""
    if ms <= 0:
        return
    end = time.thread_time() + ms / 1000
    x = 0
    while time.thread_time() < end:
        for _ in range(500):
            x += 1


class Samples(Dataset):
    """Samples that cost what the case says: CPU, sleep, a file read."""

    def __init__(self, cpu_ms: float, wait_ms: float, data_dir: Path | None) -> None:
        self.cpu_ms, self.wait_s = cpu_ms, wait_ms / 1000
        self.files = sorted(data_dir.glob("*.bin")) if data_dir else []

    def __len__(self) -> int:
        return 10_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        burn(self.cpu_ms)
        if self.wait_s > 0:
            time.sleep(self.wait_s)
        value = float(index % 7)
        if self.files:
            raw = self.files[index % len(self.files)].read_bytes()
            value = float(raw[0])
        return torch.full((FEATURES,), value), index % 10


class Step(torch.nn.Module):
    """A linear head whose forward costs what the case says."""

    def __init__(self, cpu_ms: float, wait_ms: float, matmul: int, slow_ms: float) -> None:
        super().__init__()
        self.head = torch.nn.Linear(FEATURES, 10)
        self.cpu_ms, self.wait_s, self.matmul = cpu_ms, (wait_ms + slow_ms) / 1000, matmul
        self.a = torch.randn(MATRIX, MATRIX) / MATRIX**0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        burn(self.cpu_ms)
        if self.wait_s > 0:
            time.sleep(self.wait_s)
        a = self.a
        for _ in range(self.matmul):
            a = torch.tanh(a @ self.a)
        return self.head(x) + a.mean() * 0


def pause(kind: str, ms: float, where: Path) -> None:
    """One periodic pause: a sleep, CPU, or a checkpoint-like write and fsync."""
    if kind == "sleep":
        time.sleep(ms / 1000)
    elif kind == "cpu":
        burn(ms)
    else:
        with open(where, "wb") as out:
            out.write(os.urandom(int(ms) * 64 * 1024))  # ms: 64 KiB each
            out.flush()
            os.fsync(out.fileno())


def evaluate(model: torch.nn.Module, loader: DataLoader, batches: int) -> None:
    """An evaluation pass: ``batches`` of ``loader`` through the model, gradients off."""
    model.eval()
    with torch.no_grad():
        for _, (inputs, _labels) in zip(range(batches), loader, strict=False):
            model(inputs)  # (the count first: no batch loaded past the last)
    model.train()


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--sample-cpu-ms", type=float, default=0.0)
    p.add_argument("--sample-wait-ms", type=float, default=0.0)
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--step-cpu-ms", type=float, default=0.0)
    p.add_argument("--step-wait-ms", type=float, default=0.0)
    p.add_argument("--matmul", type=int, default=0)
    p.add_argument("--pause-every", type=int, default=0)
    p.add_argument("--pause-ms", type=float, default=0.0)
    p.add_argument("--pause-kind", choices=("sleep", "cpu", "fsync", "eval"), default="sleep")
    p.add_argument("--eval-batches", type=int, default=0)
    p.add_argument("--pause-dir", type=Path, default=Path("/tmp"))
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--autocast", choices=("off", "bf16"), default="off")
    return p.parse_args()


def distributed(model: torch.nn.Module) -> torch.nn.Module:
    """DDP over gloo when torchrun's variables say so, else the model as it is."""
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return model
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", timeout=timedelta(seconds=90))
    return DistributedDataParallel(model)


def stop_together(done: bool) -> bool:
    """Every rank stops at the same step: the first whose time is up decides."""
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return done
    from ddp_network import any_rank_done

    return any_rank_done(done)


def main() -> None:
    o = parse()
    torch.set_num_threads(o.threads)
    rank = int(os.environ.get("RANK", "0"))
    slow = o.slow_ms if rank == o.slow_rank else 0.0
    kwargs = {"prefetch_factor": o.prefetch, "persistent_workers": True} if o.workers else {}
    samples = Samples(o.sample_cpu_ms, o.sample_wait_ms, o.data_dir)
    loader = DataLoader(samples, batch_size=o.batch, num_workers=o.workers, **kwargs)
    model = distributed(Step(o.step_cpu_ms, o.step_wait_ms, o.matmul, slow))
    checkpoint = o.pause_dir / f"gains-pause-{os.getpid()}.bin"

    held_out = DataLoader(samples, batch_size=o.batch)  # the evaluation's, loaded in the trainer

    def after_step(step: int) -> None:
        if not o.pause_every or step % o.pause_every:
            return
        if o.pause_kind == "eval":
            evaluate(model, held_out, o.eval_batches)
        else:
            pause(o.pause_kind, o.pause_ms, checkpoint)

    started = time.monotonic()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=o.autocast == "bf16")
    try:
        with autocast:  # on the training thread, around every forward
            steps = train(loader, model, o.seconds, after_step, stop_together)
    finally:
        checkpoint.unlink(missing_ok=True)
    report("job", steps, started)


if __name__ == "__main__":
    main()
