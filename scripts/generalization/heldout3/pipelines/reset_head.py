"""Conv encoder + linear head on synthetic texture patches; at a fixed step the head is
deliberately re-initialised (reset_parameters) and its optimizer state dropped.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, n_classes=3):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.InstanceNorm2d(8, affine=True), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
            nn.Flatten(),
        )
        self.head = nn.Linear(64, n_classes)

    def forward(self, x):
        return self.head(self.encoder(x))


def textures(gen, n):
    y = torch.randint(0, 3, (n,), generator=gen)
    freq = (y.float() + 1.0)[:, None, None, None]
    grid = torch.linspace(0, 3.14, 12)
    base = torch.sin(freq * grid[None, None, :, None]) * torch.cos(freq * grid[None, None, None])
    return base + 0.3 * torch.randn(n, 1, 12, 12, generator=gen), y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--reset-at", type=int, default=4)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    loss = torch.tensor(0.0)
    for step in range(args.steps):
        if step == args.reset_at:
            model.head.reset_parameters()
            for p in model.head.parameters():
                opt.state.pop(p, None)
            print(f"head re-initialised at step {step}")
        x, y = textures(gen, 24)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
