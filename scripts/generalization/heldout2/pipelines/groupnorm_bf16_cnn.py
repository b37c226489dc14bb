"""Trains a small residual conv net with GroupNorm on synthetic oriented-stripe images under
CPU bfloat16 autocast (the loss is computed inside the autocast region; fp32 master weights).
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn


class ResBlock(nn.Module):
    def __init__(self, ch: int, groups: int) -> None:
        super().__init__()
        self.gn1 = nn.GroupNorm(groups, ch)
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.gn2 = nn.GroupNorm(groups, ch)
        self.conv2 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.gn1(x)))
        h = self.conv2(F.silu(self.gn2(h)))
        return x + h


class StripeNet(nn.Module):
    def __init__(self, width: int = 16, groups: int = 4, n_classes: int = 4) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, width, 3, padding=1)
        self.res1 = ResBlock(width, groups)
        self.down = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.res2 = ResBlock(2 * width, groups)
        self.norm = nn.GroupNorm(groups, 2 * width)
        self.fc = nn.Linear(2 * width, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.res1(self.stem(x))
        x = self.res2(self.down(x))
        x = F.silu(self.norm(x)).mean(dim=(2, 3))
        return self.fc(x)


def stripes(n: int, gen: torch.Generator, size: int = 16):
    labels = torch.randint(0, 4, (n,), generator=gen)
    theta = labels.float() * math.pi / 4
    yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
    phase = 2 * math.pi * torch.rand(n, generator=gen)
    proj = torch.cos(theta)[:, None, None] * xx + torch.sin(theta)[:, None, None] * yy
    img = torch.sin(0.9 * proj + phase[:, None, None])
    img = img + 0.5 * torch.randn(n, size, size, generator=gen)
    return img.unsqueeze(1), labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 3)
    model = StripeNet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)

    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        images, labels = stripes(args.batch_size, gen)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits = model(images)
            loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
