"""A DCGAN-style loop on vectors: per batch, a discriminator update then a generator update,
each with its own optimizer (two ``optimizer.step()`` calls per iteration)."""

import os

import torch
from loop_clock import LoopClock
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

BATCH, NOISE, DIM = 32, 32, 256


def mlp(n_in: int, n_out: int) -> nn.Module:
    return nn.Sequential(nn.Linear(n_in, 512), nn.LeakyReLU(0.2), nn.Linear(512, 512),
                         nn.LeakyReLU(0.2), nn.Linear(512, n_out))  # fmt: skip


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    loader = DataLoader(TensorDataset(torch.randn(4096, DIM)), batch_size=BATCH, shuffle=True)
    net_g, net_d = mlp(NOISE, DIM), mlp(DIM, 1)
    opt_d = torch.optim.Adam(net_d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(net_g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    criterion = nn.BCEWithLogitsLoss()
    ones, zeros = torch.ones(BATCH, 1), torch.zeros(BATCH, 1)
    clock = LoopClock(float(os.environ.get("LOOP_SECONDS", "4")))
    batches = iter(())
    while clock.running():
        clock.mark("data")
        real = next(batches, None)
        if real is None:
            batches = iter(loader)
            real = next(batches)
        (real,) = real
        clock.mark("forward")
        net_d.zero_grad()
        fake = net_g(torch.randn(BATCH, NOISE))
        loss_d = criterion(net_d(real), ones) + criterion(net_d(fake.detach()), zeros)
        clock.mark("backward")
        loss_d.backward()
        clock.mark("optimizer")
        opt_d.step()
        clock.mark("forward")
        net_g.zero_grad()
        loss_g = criterion(net_d(fake), ones)
        clock.mark("backward")
        loss_g.backward()
        clock.mark("optimizer")
        opt_g.step()
    clock.report(batch=BATCH)
    print(f"iterations={len(clock.starts)} loss_d={loss_d.item():.3f}")


if __name__ == "__main__":
    main()
