"""Trains a tiny GAN (MLP generator and discriminator) on a 2-D ring of Gaussians with two Adam optimizers
and alternating updates: a discriminator step on real vs. detached fake samples, then a generator step with
the non-saturating loss."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Generator(nn.Module):
    def __init__(self, z_dim=4, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(z_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 2))

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, hidden),
                                 nn.LeakyReLU(0.2), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


def sample_ring(gen, n, modes=6, radius=2.0, std=0.1):
    k = torch.randint(0, modes, (n,), generator=gen).float()
    angle = 2 * math.pi * k / modes
    centers = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    return centers + std * torch.randn(n, 2, generator=gen)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--z-dim", type=int, default=4)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    netG, netD = Generator(args.z_dim), Discriminator()
    optG = torch.optim.Adam(netG.parameters(), lr=args.lr, betas=(0.5, 0.999))
    optD = torch.optim.Adam(netD.parameters(), lr=args.lr, betas=(0.5, 0.999))
    ones = torch.ones(args.batch_size)
    zeros = torch.zeros(args.batch_size)

    for _step in range(args.steps):
        real = sample_ring(gen, args.batch_size)
        z = torch.randn(args.batch_size, args.z_dim, generator=gen)
        fake = netG(z)

        # discriminator update
        optD.zero_grad()
        d_loss = (F.binary_cross_entropy_with_logits(netD(real), ones)
                  + F.binary_cross_entropy_with_logits(netD(fake.detach()), zeros))
        d_loss.backward()
        optD.step()

        # generator update
        optG.zero_grad()
        g_loss = F.binary_cross_entropy_with_logits(netD(fake), ones)
        g_loss.backward()
        optG.step()

    print(f"final d_loss {d_loss.item():.6f}")
    print(f"final loss {g_loss.item():.6f}")


if __name__ == "__main__":
    main()
