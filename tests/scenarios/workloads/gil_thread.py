"""`gil_contention`: a second Python thread in the trainer holds the GIL, and its look-alikes.

The training loop is a small MLP on an in-memory tensor (one intra-op thread): many short
torch calls, between which the training thread needs the interpreter.  ``--thread`` starts one
more thread beside it, as trainers do:

* ``hog``: ``stats-aggregator`` aggregates metrics in pure Python for 50 ms, then sleeps 50 ms:
  it holds the GIL half the time, and the loop waits for it;
* ``logger``: ``metrics-logger`` writes one line a second (idle the rest of the time);
* ``io``: ``shard-reader`` reads the shards a producer streams through a pipe (4 MiB every
  50 ms): it waits in ``read`` with the GIL released most of the time;
* ``waiters``: three threads blocked on events and queues (as NCCL's and a loader's helper
  threads wait) and ``comm-worker`` running large torch matrix products (tens of ms of C that
  releases the GIL each);
* ``none``: the loop alone.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
import time

import torch
from common import mlp, parser, report, train
from torch.utils.data import DataLoader, Dataset


def aggregate(stop: threading.Event) -> None:
    """Pure-Python work half the time: the GIL is held while it runs."""
    totals: dict[int, float] = {}
    while not stop.is_set():
        until = time.monotonic() + 0.05
        while time.monotonic() < until:
            for i in range(200):
                totals[i % 17] = totals.get(i % 17, 0.0) + i * 0.5
        time.sleep(0.05)


def log_lines(stop: threading.Event) -> None:
    while not stop.wait(1.0):
        print(f"metrics at {time.monotonic():.0f}", flush=True)


def read_shards(stop: threading.Event) -> None:
    """Reads what a producer process streams through a pipe: blocked in ``read`` (the GIL
    released) until each shard arrives."""
    producer = subprocess.Popen(
        ["sh", "-c", "while :; do head -c 4194304 /dev/zero; sleep 0.05; done"],
        stdout=subprocess.PIPE,
    )
    assert producer.stdout is not None
    try:
        while not stop.is_set() and producer.stdout.read1(1 << 20):
            pass
    finally:
        producer.kill()
        producer.wait()


def comm_worker(stop: threading.Event) -> None:
    """Large matrix products in torch: C code that releases the GIL for tens of ms, like a
    collective's transfer."""
    a = torch.randn(768, 768)
    while not stop.is_set():
        a = torch.tanh(a @ a)


def wait_forever(stop: threading.Event) -> None:
    q: queue.Queue[int] = queue.Queue()
    while not stop.is_set():
        with contextlib.suppress(queue.Empty):
            q.get(timeout=5.0)


class Batches(Dataset):
    """Batches made once, in memory: loading costs the loop next to nothing."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batches[index]


THREADS = {
    "hog": [("stats-aggregator", aggregate)],
    "logger": [("metrics-logger", log_lines)],
    "io": [("shard-reader", read_shards)],
    "waiters": [
        ("nccl-watchdog", wait_forever),
        ("pin-memory", wait_forever),
        ("loader-helper", wait_forever),
        ("comm-worker", comm_worker),
    ],
    "none": [],
}


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--thread", choices=sorted(THREADS), default="hog")
    opts = args.parse_args()
    torch.set_num_threads(1)
    stop = threading.Event()
    for name, target in THREADS[opts.thread]:
        threading.Thread(target=target, args=(stop,), name=name, daemon=True).start()
    batches = [(torch.randn(64, 128), torch.randint(0, 10, (64,))) for _ in range(128)]
    loader = DataLoader(Batches(batches), batch_size=None, shuffle=True, num_workers=0)
    started = time.monotonic()
    steps = train(loader, mlp(128, 512), opts.seconds)
    stop.set()
    report(f"gil_thread ({opts.thread})", steps, started)


if __name__ == "__main__":
    main()
