"""Hinge-loss GAN on an 8-Gaussian ring: alternating D/G updates with separate Adam optimizers,
n_critic discriminator steps per generator step, and an EMA copy of the generator."""
import argparse
import copy
import math

import torch
import torch.nn as nn


def ring_sample(gen, n, modes=8, r=2.0, std=0.05):
    k = torch.randint(0, modes, (n,), generator=gen).float()
    ang = 2 * math.pi * k / modes
    centers = torch.stack([r * torch.cos(ang), r * torch.sin(ang)], 1)
    return centers + std * torch.randn(n, 2, generator=gen)


def mlp(i, h, o, act):
    return nn.Sequential(nn.Linear(i, h), act(), nn.Linear(h, h), act(), nn.Linear(h, o))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr-g", type=float, default=2e-4)
    ap.add_argument("--lr-d", type=float, default=4e-4)
    ap.add_argument("--n-critic", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--z-dim", type=int, default=4)
    ap.add_argument("--ema", type=float, default=0.99)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1234)
    netG = mlp(args.z_dim, 64, 2, nn.ReLU)
    netD = mlp(2, 64, 1, lambda: nn.LeakyReLU(0.2))
    g_ema = copy.deepcopy(netG).eval()
    for p in g_ema.parameters():
        p.requires_grad_(False)
    optG = torch.optim.Adam(netG.parameters(), lr=args.lr_g, betas=(0.5, 0.999))
    optD = torch.optim.Adam(netD.parameters(), lr=args.lr_d, betas=(0.5, 0.999))
    for it in range(args.steps):
        # --- discriminator ---
        for _ in range(args.n_critic):
            real = ring_sample(gen, args.batch_size)
            z = torch.randn(args.batch_size, args.z_dim, generator=gen)
            with torch.no_grad():
                fake = netG(z)
            d_loss = torch.relu(1 - netD(real)).mean() + torch.relu(1 + netD(fake)).mean()
            optD.zero_grad(set_to_none=True)
            d_loss.backward()
            optD.step()
        # --- generator (D frozen for this pass) ---
        netD.requires_grad_(False)
        z = torch.randn(args.batch_size, args.z_dim, generator=gen)
        g_loss = -netD(netG(z)).mean()
        optG.zero_grad(set_to_none=True)
        g_loss.backward()
        optG.step()
        netD.requires_grad_(True)
        with torch.no_grad():
            for pe, p in zip(g_ema.parameters(), netG.parameters(), strict=True):
                pe.lerp_(p, 1 - args.ema)
        print(f"it {it} d_loss {d_loss.item():.4f} g_loss {g_loss.item():.4f}")
    with torch.no_grad():
        s = g_ema(torch.randn(256, args.z_dim, generator=gen))
    print(f"ema sample radius {s.norm(dim=1).mean().item():.3f}")


if __name__ == "__main__":
    main()
