"""A plain gloo DDP training script for the comm-hook tests, started by torchrun.

It prints a SHA-256 of every parameter's bytes after training (rank 0), so a run with and
without `traintop run` can be compared bit for bit.  ``--user-hook`` registers a comm hook of
its own after DDP is built (as users do) and prints how often it ran; ``--straggle-ms`` makes
the last rank slow before each backward, so the others wait on it inside DDP's all-reduce.
``--manual-allreduce`` trains without DDP and averages gradients with blocking
``dist.all_reduce`` calls after backward, as the PyTorch distributed tutorial does.
``--then-user-hook`` trains a second, fresh model with ``--user-hook`` in the same processes
and prints its line after the first (one job, two checks: torch starts once).
``--pause-ms`` rests after each step, as a job watched for minutes need not keep two cores
busy (the monitor's tests run it beside others).
"""

import argparse
import hashlib
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

CALLS = [0]


def counting_allreduce(
    group: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """The documented example hook: average each bucket, and count the calls."""
    CALLS[0] += 1
    buffer = bucket.buffer().div_(group.size())
    return (
        dist.all_reduce(buffer, group=group, async_op=True)
        .get_future()
        .then(lambda fut: fut.value()[0])
    )


def average_gradients(model: torch.nn.Module, world: int) -> None:
    """The tutorial's hand-written data parallelism: one blocking all-reduce per parameter."""
    for param in model.parameters():
        dist.all_reduce(param.grad)
        param.grad /= world


def train(opts: argparse.Namespace, rank: int, world: int, user_hook: bool) -> str:
    """Train a fresh model from the same seeds; its parameters' digest and the hook's calls."""
    CALLS[0] = 0
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    ddp = model if opts.manual_allreduce else DistributedDataParallel(model, bucket_cap_mb=0.05)
    if user_hook:
        ddp.register_comm_hook(dist.group.WORLD, counting_allreduce)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(1 + rank)
    for _ in range(opts.steps):
        inputs = torch.randn(32, 64, generator=gen)
        labels = torch.randint(0, 10, (32,), generator=gen)
        loss = torch.nn.functional.cross_entropy(ddp(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        if opts.straggle_ms and rank == world - 1:
            time.sleep(opts.straggle_ms / 1000)
        loss.backward()
        if opts.manual_allreduce:
            average_gradients(model, world)
        optimizer.step()
        if opts.pause_ms:
            time.sleep(opts.pause_ms / 1000)
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
    return f"params={digest.hexdigest()} hook_calls={CALLS[0]}"


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--steps", type=int, default=20)
    args.add_argument("--straggle-ms", type=float, default=0.0)
    args.add_argument("--pause-ms", type=float, default=0.0)
    args.add_argument("--user-hook", action="store_true")
    args.add_argument("--then-user-hook", action="store_true")
    args.add_argument("--manual-allreduce", action="store_true")
    opts = args.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    hooks = [opts.user_hook] + ([True] if opts.then_user_hook else [])
    lines = [train(opts, rank, world, hook) for hook in hooks]
    if rank == 0:
        print("\n".join(lines), flush=True)
    dist.destroy_process_group()
    # The hook's ``.then`` callback is a Python function that gloo's worker thread drops right
    # after completing the future DDP waits on, taking the GIL to do so.  When that drop races
    # the interpreter's exit, Python ends the thread inside a noexcept frame and the rank aborts
    # ("terminate called without an active exception"; core: take_gil -> PyThread_exit_thread
    # under PythonFunctionGuard's release in ProcessGroupGloo::runLoop): 2 of 20 plain runs on
    # the 2-core VM, and still with a barrier or DDP freed first; 0 of 50 since.  Nothing is
    # left to finalize here, so the rank leaves without doing so.
    os._exit(0)


if __name__ == "__main__":
    main()
