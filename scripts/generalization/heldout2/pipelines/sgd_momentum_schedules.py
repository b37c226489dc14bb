"""Trains a BatchNorm MLP on a synthetic two-spirals-like task with SGD (Nesterov momentum)
and a learning-rate schedule stepped once per optimizer step: MultiStepLR (default) or
CosineAnnealingWarmRestarts.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn


def spirals(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, 2, (n,), generator=gen)
    r = torch.rand(n, generator=gen) * 3 + 0.3
    theta = r * 2.0 + labels.float() * math.pi
    pts = torch.stack([r * torch.cos(theta), r * torch.sin(theta)], dim=1)
    return pts + 0.1 * torch.randn(n, 2, generator=gen), labels


def build_model(hidden: int = 64) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(2, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
        nn.Linear(hidden, 2),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--scheduler", choices=["multistep", "cosine-restarts"],
                        default="multistep")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True,
                                weight_decay=5e-4)
    if args.scheduler == "multistep":
        milestones = [max(1, args.steps // 2), max(2, 3 * args.steps // 4)]
        scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones, gamma=0.2)
    else:
        scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
            optimizer, T_0=3, T_mult=2, eta_min=1e-3)

    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        x, y = spirals(args.batch_size, gen)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        print(f"step {step} lr {optimizer.param_groups[0]['lr']:.4f} loss {loss.item():.4f}")

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
