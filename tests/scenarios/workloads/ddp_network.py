"""`network`: a two-rank gloo DDP job whose gradient all-reduce crosses a slow link.

Ranks come from the usual ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` variables.
Under `traintop run` alone the all-reduce hides inside ``backward`` (DDP runs it from autograd
hooks), so ``--timed-allreduce`` uses the explicit probe API: a DDP communication hook runs each
bucket's all-reduce inside ``probe.phase("allreduce")``.
The model has about 260 k parameters (1 MB of gradients per step) while its compute is about a
millisecond, so at tens of megabits per second the all-reduce is nearly the whole step;
``--batch 512`` makes the compute a healthy job's share (the all-reduce then hides under it
on a fast link).
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist
from common import parser, report, train
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

import traintop

FEATURES = 256


def mlp() -> torch.nn.Module:
    """Four 256x256 layers: ~260 k parameters, cheap to run, heavy to synchronise."""
    layers: list[torch.nn.Module] = []
    for _ in range(4):
        layers += [torch.nn.Linear(FEATURES, FEATURES), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(FEATURES, 10))


def any_rank_done(done: bool) -> bool:
    """True on every rank as soon as one rank's time is up (one-element all-reduce, MAX)."""
    flag = torch.tensor([1.0 if done else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def train_ranks(loader, model: torch.nn.Module, seconds: float, name: str) -> None:
    """Train until every rank agrees the time is up, report, and leave the process group."""
    started = time.monotonic()
    try:
        steps = train(loader, model, seconds, agree=any_rank_done)
        report(f"{name} rank {dist.get_rank()}", steps, started)
    finally:
        dist.destroy_process_group()


def timed_allreduce(probe: traintop.Probe):
    """A DDP comm hook: each gradient bucket is averaged by a blocking, timed all-reduce.

    DDP checks the hook's annotations at run time, hence real (not postponed) annotations here.
    """

    def hook(_state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        with probe.phase("allreduce"):
            grads = bucket.buffer().div_(dist.get_world_size())
            dist.all_reduce(grads)
        future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        future.set_result(grads)
        return future

    return hook


def train_timed(loader: DataLoader, model: DistributedDataParallel, seconds: float) -> int:
    """The loop of ``common.train`` with every phase marked through the explicit probe API."""
    probe = traintop.attach(phases=("allreduce",))
    model.register_comm_hook(None, timed_allreduce(probe))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    deadline = time.monotonic() + seconds
    step = 0
    while True:
        for inputs, labels in probe.loader(loader):
            with probe.phase("forward"):
                loss = torch.nn.functional.cross_entropy(model(inputs), labels)
            optimizer.zero_grad(set_to_none=True)
            with probe.phase("backward"):
                loss.backward()
            with probe.phase("optimizer"):
                optimizer.step()
            probe.step()
            step += 1
            if any_rank_done(time.monotonic() >= deadline):
                return step


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--timed-allreduce", action="store_true", help="explicit probe phases")
    args.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    opts = args.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    samples = max(1024, 4 * opts.batch)
    data = TensorDataset(torch.randn(samples, FEATURES), torch.randint(0, 10, (samples,)))
    loader = DataLoader(data, batch_size=opts.batch, shuffle=True, num_workers=0)
    model = DistributedDataParallel(mlp())
    started = time.monotonic()
    try:
        if opts.timed_allreduce:
            steps = train_timed(loader, model, opts.seconds)
        else:
            steps = train(loader, model, opts.seconds, agree=any_rank_done)
        report(f"network rank {dist.get_rank()}", steps, started)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
