"""Denoising autoencoder on synthetic low-rank 32-d signals, with functional dropout in the
bottleneck; reconstruction error is evaluated every few steps. --bug dropout-in-eval.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Bottleneck(nn.Module):
    def __init__(self, hidden: int, code: int, p: float, leaky_eval: bool = False):
        super().__init__()
        self.down = nn.Linear(hidden, code)
        self.up = nn.Linear(code, hidden)
        self.p = p
        self.leaky_eval = leaky_eval

    def forward(self, h):
        z = torch.tanh(self.down(h))
        if self.leaky_eval:
            z = F.dropout(z, self.p)  # training defaults to True
        else:
            z = F.dropout(z, self.p, training=self.training)
        return F.silu(self.up(z))


class DenoisingAE(nn.Module):
    def __init__(self, dim=32, hidden=64, code=8, p=0.2, leaky_eval=False):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, hidden), nn.SiLU())
        self.bottleneck = Bottleneck(hidden, code, p, leaky_eval)
        self.decoder = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.decoder(self.bottleneck(self.encoder(x)))


def make_signals(gen, basis, n):
    coeff = torch.randn(n, basis.shape[0], generator=gen)
    return coeff @ basis


@torch.no_grad()
def evaluate(model, clean):
    model.eval()
    err = F.mse_loss(model(clean), clean).item()
    model.train()
    return err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--noise", type=float, default=0.3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--eval-every", type=int, default=3)
    ap.add_argument("--bug", default="none", choices=["none", "dropout-in-eval"])
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    basis = torch.randn(4, 32, generator=gen) / 2
    val = make_signals(gen, basis, 64)
    model = DenoisingAE(leaky_eval=args.bug == "dropout-in-eval")
    opt = torch.optim.RMSprop(model.parameters(), lr=args.lr, alpha=0.9)

    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        if step > 0 and step % args.eval_every == 0:
            print(f"step {step} val mse {evaluate(model, val):.5f}")
        clean = make_signals(gen, basis, args.batch_size)
        noisy = clean + args.noise * torch.randn(clean.shape, generator=gen)
        loss = F.mse_loss(model(noisy), clean)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.5f} val mse {evaluate(model, val):.5f}")


if __name__ == "__main__":
    main()
