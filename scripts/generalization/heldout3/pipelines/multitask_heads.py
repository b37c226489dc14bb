"""Shared-trunk multi-task network: one head classifies the quadrant of a 2-D point cloud
summary, another regresses its spread; the two losses are summed with a fixed weight.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiTask(nn.Module):
    def __init__(self, d_in=16, width=32):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(d_in, width), nn.Mish(), nn.Linear(width, width),
                                   nn.Mish())
        self.cls_head = nn.Linear(width, 4)
        self.reg_head = nn.Sequential(nn.Linear(width, 8), nn.Mish(), nn.Linear(8, 1))

    def forward(self, x):
        z = self.trunk(x)
        return self.cls_head(z), self.reg_head(z).squeeze(-1)


def batch(gen, n):
    center = torch.randn(n, 2, generator=gen)
    spread = torch.rand(n, 1, generator=gen) + 0.2
    pts = center[:, None, :] + spread[:, :, None] * torch.randn(n, 8, 2, generator=gen)
    quadrant = (center[:, 0] > 0).long() * 2 + (center[:, 1] > 0).long()
    return pts.flatten(1), quadrant, spread.squeeze(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--reg-weight", type=float, default=0.5)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = MultiTask()
    opt = torch.optim.Adamax(model.parameters(), lr=args.lr)

    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        x, quad, spread = batch(gen, 32)
        logits, pred_spread = model(x)
        loss_cls = F.cross_entropy(logits, quad)
        loss_reg = F.mse_loss(pred_spread, spread)
        loss = loss_cls + args.reg_weight * loss_reg
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.5f} (cls {loss_cls.item():.4f} reg {loss_reg.item():.4f})")


if __name__ == "__main__":
    main()
