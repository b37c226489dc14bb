"""Gaussian VAE on synthetic 12-d mixture data (warm-up on the KL term, Adam + ExponentialLR).

Uses a DataLoader over a TensorDataset; gradients are cleared manually with set-to-None on the
trainable parameter collection returned by a helper.
"""
from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Encoder(nn.Module):
    def __init__(self, d_in, d_hid, d_z):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, d_hid), nn.SiLU(), nn.Linear(d_hid, d_hid), nn.SiLU())
        self.mu = nn.Linear(d_hid, d_z)
        self.logvar = nn.Linear(d_hid, d_z)

    def forward(self, x):
        h = self.body(x)
        return self.mu(h), self.logvar(h).clamp(-6.0, 4.0)


class VAE(nn.Module):
    def __init__(self, d_in=12, d_hid=32, d_z=3):
        super().__init__()
        self.enc = Encoder(d_in, d_hid, d_z)
        self.dec = nn.Sequential(nn.Linear(d_z, d_hid), nn.SiLU(), nn.Linear(d_hid, d_in))

    def forward(self, x):
        mu, logvar = self.enc(x)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return self.dec(z), mu, logvar


def trainable(model: nn.Module, lazy: bool = False):
    """Parameters to optimise. ``lazy`` skips building the list (handy for very large models)."""
    params = (p for p in model.parameters() if p.requires_grad)
    return params if lazy else list(params)


def synthetic_mixture(gen, n, d=12, k=4):
    centers = 2.5 * torch.randn(k, d, generator=gen)
    comp = torch.randint(0, k, (n,), generator=gen)
    return centers[comp] + 0.4 * torch.randn(n, d, generator=gen)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bug", choices=["no-zero-grad"], default=None)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--kl-warmup", type=int, default=10)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    data = synthetic_mixture(g, 512)
    loader = DataLoader(TensorDataset(data), batch_size=args.batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(args.seed + 1))

    vae = VAE(d_hid=args.hidden)
    params = trainable(vae, lazy=args.bug == "no-zero-grad")
    opt = torch.optim.Adam(params, lr=args.lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)

    it, losses = 0, []
    for epoch in range(10_000):
        for (x,) in loader:
            if it >= args.steps:
                break
            for p in params:
                p.grad = None
            recon, mu, logvar = vae(x)
            rec = (recon - x).pow(2).sum(-1).mean()
            kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(-1).mean()
            beta = min(1.0, (it + 1) / args.kl_warmup)
            loss = rec + beta * kl
            loss.backward()
            opt.step()
            losses.append(loss.item())
            print(f"[{epoch}:{it}] loss={loss.item():.4f} rec={rec.item():.4f} kl={kl.item():.4f}")
            it += 1
        else:
            sched.step()
            continue
        break
    if args.save:
        torch.save({"state": vae.state_dict(), "losses": losses}, args.save)


if __name__ == "__main__":
    main()
