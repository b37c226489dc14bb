"""Trains a polynomial-feature MLP regressor by slicing mini-batches out of in-memory tensors
by hand (x[i:i + bs] over a shuffled copy each epoch), no DataLoader; RMSprop optimizer.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class PolyMLP(nn.Module):
    def __init__(self, d_in: int = 3, degree: int = 3, hidden: int = 32) -> None:
        super().__init__()
        self.degree = degree
        self.net = nn.Sequential(
            nn.Linear(d_in * degree, hidden), nn.Softplus(), nn.Linear(hidden, hidden),
            nn.Softplus(), nn.Linear(hidden, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = torch.cat([x ** k for k in range(1, self.degree + 1)], dim=-1)
        return self.net(feats).squeeze(-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=40)
    parser.add_argument("--n-samples", type=int, default=120)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    x_all = torch.rand(args.n_samples, 3, generator=gen) * 2 - 1
    y_all = x_all[:, 0] ** 3 - 0.5 * x_all[:, 1] * x_all[:, 2] + 0.05 * torch.randn(
        args.n_samples, generator=gen)

    model = PolyMLP()
    optimizer = torch.optim.RMSprop(model.parameters(), lr=args.lr, alpha=0.9)

    step, epoch = 0, 0
    loss = torch.tensor(0.0)
    model.train()
    while step < args.steps:
        perm = torch.randperm(args.n_samples, generator=gen)
        xs, ys = x_all[perm], y_all[perm]
        for start in range(0, args.n_samples, args.batch_size):
            if step >= args.steps:
                break
            xb = xs[start:start + args.batch_size]
            yb = ys[start:start + args.batch_size]
            loss = F.mse_loss(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} step {step} batch {xb.shape[0]} loss {loss.item():.5f}")
            step += 1
        epoch += 1

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
