"""Neural additive model (one small subnet per feature, outputs summed) for synthetic tabular regression.

No torch.optim: a hand-written Nesterov-momentum SGD with decoupled weight decay updates the
parameters inside torch.no_grad(). The learning rate warms up linearly from exactly 0, so the
very first update is a no-op by design.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn


class FeatureNet(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x)


class NAM(nn.Module):
    def __init__(self, n_features, hidden):
        super().__init__()
        self.shape_fns = nn.ModuleList(FeatureNet(hidden) for _ in range(n_features))
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        parts = [f(x[:, i:i + 1]) for i, f in enumerate(self.shape_fns)]
        return torch.cat(parts, 1).sum(1) + self.bias


def lr_at(step, base_lr, warmup):
    return base_lr * min(1.0, step / warmup)  # 0.0 at step 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    X = torch.rand(1024, 4, generator=gen) * 2 - 1
    y = torch.sin(3 * X[:, 0]) + X[:, 1] ** 2 - 0.5 * X[:, 2] + 0.05 * torch.randn(1024, generator=gen)

    model = NAM(4, args.hidden)
    velocity = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    cursor = 0
    for step in range(args.steps):
        if cursor + args.batch_size > X.shape[0]:
            cursor = 0
        xb, yb = X[cursor:cursor + args.batch_size], y[cursor:cursor + args.batch_size]
        cursor += args.batch_size
        model.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        lr = lr_at(step, args.lr, args.warmup)
        with torch.no_grad():
            for name, p in model.named_parameters():
                v = velocity[name]
                v.mul_(args.momentum).add_(p.grad)
                update = p.grad + args.momentum * v  # Nesterov look-ahead
                p.mul_(1 - lr * args.weight_decay).add_(update, alpha=-lr)
        print(f"step {step} lr {lr:.4f} mse {loss.item():.5f}")


if __name__ == "__main__":
    main()
