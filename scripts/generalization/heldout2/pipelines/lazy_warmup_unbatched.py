"""Trains an MLP built from lazy modules (LazyLinear) on synthetic tabular data; before the
optimizer is created, a warm-up forward on ONE unbatched sample (shape [features], no batch dim)
materialises the lazy parameters. Uses Adamax and label smoothing.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class LazyTabularNet(nn.Module):
    def __init__(self, hidden: int = 32, n_classes: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.LazyLinear(hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.LazyLinear(hidden)
        self.out = nn.LazyLinear(n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.norm(self.fc1(x)))
        h = F.gelu(self.fc2(h)) + h
        return self.out(h)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=4e-3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--features", type=int, default=15)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    proto = torch.randn(4, args.features, generator=gen)

    def batch(n: int):
        y = torch.randint(0, 4, (n,), generator=gen)
        return proto[y] + torch.randn(n, args.features, generator=gen), y

    model = LazyTabularNet()
    sample, _ = batch(1)
    with torch.no_grad():
        warm = model(sample[0])  # unbatched: shape [features]
    print(f"warm-up output shape {tuple(warm.shape)}")

    optimizer = torch.optim.Adamax(model.parameters(), lr=args.lr)
    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        x, y = batch(args.batch_size)
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
