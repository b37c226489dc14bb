"""Residual MLP classifier on synthetic Gaussian-cluster features, trained with mixup and
label-smoothed cross entropy; SGD with momentum and linear warmup.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn


class ResMLP(nn.Module):
    def __init__(self, d_in=24, width=48, n_classes=5, depth=2):
        super().__init__()
        self.inp = nn.Linear(d_in, width)
        self.layers = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU())
            for _ in range(depth)
        )
        self.cls = nn.Linear(width, n_classes)

    def forward(self, x):
        h = self.inp(x)
        for layer in self.layers:
            h = h + layer(h)
        return self.cls(h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--alpha", type=float, default=0.4)
    ap.add_argument("--smoothing", type=float, default=0.1)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    centers = 2 * torch.randn(5, 24, generator=gen)
    model = ResMLP()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    warm = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 3))
    criterion = nn.CrossEntropyLoss(label_smoothing=args.smoothing)
    beta = torch.distributions.Beta(torch.tensor(args.alpha), torch.tensor(args.alpha))

    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        y = torch.randint(0, 5, (args.batch_size,), generator=gen)
        x = centers[y] + torch.randn(args.batch_size, 24, generator=gen)
        lam = beta.sample().item()
        perm = torch.randperm(args.batch_size, generator=gen)
        mixed = lam * x + (1 - lam) * x[perm]
        logits = model(mixed)
        loss = lam * criterion(logits, y) + (1 - lam) * criterion(logits, y[perm])
        opt.zero_grad()
        loss.backward()
        opt.step()
        warm.step()
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
