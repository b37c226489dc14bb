"""WGAN-GP on a 2-D ring-of-Gaussians: alternating critic/generator updates with two Adam optimisers.

One "step" is one generator update; each step first runs ``--n-critic`` critic updates (each with
its own optimizer.step()), with a gradient penalty computed through create_graph=True.
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn


def ring_sampler(gen, n, modes=8, radius=2.0):
    k = torch.randint(0, modes, (n,), generator=gen).float()
    ang = 2 * math.pi * k / modes
    centers = torch.stack([radius * ang.cos(), radius * ang.sin()], 1)
    return centers + 0.05 * torch.randn(n, 2, generator=gen)


def mlp(d_in, d_h, d_out, act):
    return nn.Sequential(nn.Linear(d_in, d_h), act(), nn.Linear(d_h, d_h), act(), nn.Linear(d_h, d_out))


def gradient_penalty(critic, real, fake, gen):
    eps = torch.rand(real.shape[0], 1, generator=gen)
    mix = (eps * real + (1 - eps) * fake).requires_grad_(True)
    out = critic(mix)
    (grad,) = torch.autograd.grad(out.sum(), mix, create_graph=True)
    return ((grad.norm(dim=1) - 1) ** 2).mean()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--n-critic", type=int, default=3)
    p.add_argument("--gp-weight", type=float, default=10.0)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    G = mlp(4, args.hidden, 2, nn.ReLU)
    D = mlp(2, args.hidden, 1, lambda: nn.LeakyReLU(0.2))
    opt_g = torch.optim.Adam(G.parameters(), lr=args.lr, betas=(0.5, 0.9))
    opt_d = torch.optim.Adam(D.parameters(), lr=args.lr, betas=(0.5, 0.9))

    for it in range(args.steps):
        for p_ in D.parameters():
            p_.requires_grad_(True)
        for _ in range(args.n_critic):
            real = ring_sampler(g, args.batch_size)
            with torch.no_grad():
                fake = G(torch.randn(args.batch_size, 4, generator=g))
            d_loss = D(fake).mean() - D(real).mean() + args.gp_weight * gradient_penalty(D, real, fake, g)
            opt_d.zero_grad(set_to_none=True)
            d_loss.backward()
            opt_d.step()
        # generator update: critic frozen so its params get no grads
        for p_ in D.parameters():
            p_.requires_grad_(False)
        g_loss = -D(G(torch.randn(args.batch_size, 4, generator=g))).mean()
        opt_g.zero_grad(set_to_none=True)
        g_loss.backward()
        opt_g.step()
        print(f"iter {it} d_loss {d_loss.item():.4f} g_loss {g_loss.item():.4f}")


if __name__ == "__main__":
    main()
