"""Gated (GLU) MLP regressor on a synthetic Friedman-like function, optimised with
Adam(amsgrad=True) and a ReduceLROnPlateau scheduler driven by a held-out loss.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class GLUNet(nn.Module):
    def __init__(self, d_in=5, width=32):
        super().__init__()
        self.gate_proj = nn.Linear(d_in, 2 * width)
        self.hidden = nn.Linear(width, width)
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        h = F.glu(self.gate_proj(x), dim=-1)
        return self.out(F.softplus(self.hidden(h))).squeeze(-1)


def friedman(gen, n):
    x = torch.rand(n, 5, generator=gen)
    y = (10 * torch.sin(math.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2
         + 10 * x[:, 3] + 5 * x[:, 4])
    return x, (y - 14.0) / 5.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--patience", type=int, default=1)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    x_val, y_val = friedman(gen, 128)
    model = GLUNet()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, amsgrad=True)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(
        opt, mode="min", factor=0.5, patience=args.patience, threshold=0.02
    )

    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        x, y = friedman(gen, 32)
        loss = F.smooth_l1_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            val = F.smooth_l1_loss(model(x_val), y_val).item()
        plateau.step(val)
    print(f"final loss {loss.item():.5f} lr {opt.param_groups[0]['lr']:.2e}")


if __name__ == "__main__":
    main()
