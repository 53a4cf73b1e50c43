"""One rank of a synchronous data-parallel job for the fleet tests (gloo, CPU).

Each step: forward, backward, an explicit all-reduce of every gradient (what DDP does inside
backward, timed here as its own "allreduce" phase so communication is measured), optimizer.
``--slow-ms`` stands for a slower GPU on this rank's node (a throttled card does the same work
in more time): the rank works that much longer per step, and the other ranks wait for it in
the all-reduce, as they would behind a throttled node.
Started with RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set, as torchrun would.
"""

import argparse
import time

import torch
import torch.distributed as dist

import traintop


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--steps", type=int, default=1000)
    args.add_argument("--work-ms", type=float, default=20.0)
    args.add_argument("--slow-ms", type=float, default=0.0)
    opts = args.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    probe = traintop.attach(name="fleet-job")
    model = torch.nn.Linear(64, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    world = dist.get_world_size()
    for _ in range(opts.steps):  # a fixed count: every rank leaves the last all-reduce together
        probe.mark("forward")
        loss = model(torch.randn(16, 64)).square().mean()
        time.sleep((opts.work_ms + opts.slow_ms) / 1000)
        probe.mark("backward")
        loss.backward()
        probe.mark("allreduce")
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        probe.mark("optimizer")
        optimizer.step()
        optimizer.zero_grad()
        probe.step(samples=16)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
