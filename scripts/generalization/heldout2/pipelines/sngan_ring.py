"""Trains a tiny GAN on a 2-D ring of Gaussians (classic spectral_norm discriminator), evaluating
in eval mode every few steps. Bug `spectral-eval-first`: a sanity validation pass runs the
spectrally normalised discriminator in eval mode before its first training forward.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import spectral_norm


class Generator(nn.Module):
    def __init__(self, z_dim: int = 8, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(z_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, 2),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = spectral_norm(nn.Linear(2, hidden))
        self.fc2 = spectral_norm(nn.Linear(hidden, hidden))
        self.out = spectral_norm(nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.leaky_relu(self.fc1(x), 0.2)
        h = F.leaky_relu(self.fc2(h), 0.2)
        return self.out(h).squeeze(-1)


class GAN(nn.Module):
    def __init__(self, z_dim: int = 8) -> None:
        super().__init__()
        self.z_dim = z_dim
        self.gen = Generator(z_dim)
        self.disc = Discriminator()


def sample_ring(n: int, gen: torch.Generator, modes: int = 8) -> torch.Tensor:
    k = torch.randint(0, modes, (n,), generator=gen).float()
    angle = 2 * math.pi * k / modes
    centers = torch.stack([torch.cos(angle), torch.sin(angle)], dim=1) * 2.0
    return centers + 0.05 * torch.randn(n, 2, generator=gen)


@torch.no_grad()
def evaluate(gan: GAN, real: torch.Tensor, z: torch.Tensor) -> tuple[float, float]:
    gan.eval()
    fake = gan.gen(z)
    d_real, d_fake = gan.disc(real), gan.disc(fake)
    acc = 0.5 * ((d_real > 0).float().mean() + (d_fake < 0).float().mean())
    hinge = F.relu(1 - d_real).mean() + F.relu(1 + d_fake).mean()
    gan.train()
    return acc.item(), hinge.item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=3)
    parser.add_argument("--bug", default="none", choices=["none", "spectral-eval-first"])
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    data_gen = torch.Generator().manual_seed(args.seed + 17)
    gan = GAN()
    opt_d = torch.optim.Adam(gan.disc.parameters(), lr=args.lr * 2, betas=(0.0, 0.9))
    opt_g = torch.optim.Adam(gan.gen.parameters(), lr=args.lr, betas=(0.0, 0.9))

    val_real = sample_ring(128, data_gen)
    val_z = torch.randn(128, gan.z_dim, generator=data_gen)

    if args.bug == "spectral-eval-first":
        acc, hinge = evaluate(gan, val_real, val_z)
        print(f"sanity check: D acc {acc:.3f} hinge {hinge:.3f}")

    gan.train()
    g_loss = torch.tensor(0.0)
    for step in range(args.steps):
        if step > 0 and step % args.eval_every == 0:
            acc, hinge = evaluate(gan, val_real, val_z)
            print(f"step {step} eval: D acc {acc:.3f} hinge {hinge:.3f}")

        real = sample_ring(args.batch_size, data_gen)
        z = torch.randn(args.batch_size, gan.z_dim, generator=data_gen)

        # discriminator update (hinge loss)
        fake = gan.gen(z).detach()
        d_loss = F.relu(1 - gan.disc(real)).mean() + F.relu(1 + gan.disc(fake)).mean()
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()

        # generator update
        g_loss = -gan.disc(gan.gen(z)).mean()
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
        print(f"step {step} d_loss {d_loss.item():.4f} g_loss {g_loss.item():.4f}")

    acc, hinge = evaluate(gan, val_real, val_z)
    print(f"final eval: D acc {acc:.3f} hinge {hinge:.3f}")
    print(f"final loss {g_loss.item():.6f}")


if __name__ == "__main__":
    main()
