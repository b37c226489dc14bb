"""Trains a small 1-D ResNet-style encoder with a regression head on synthetic damped
oscillations; the optimizer has two param groups: the encoder at a low learning rate and the
head at a 10x higher one (discriminative learning rates); Adam plus StepLR.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class ResBlock1d(nn.Module):
    def __init__(self, ch: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(ch, ch, 5, padding=2)
        self.conv2 = nn.Conv1d(ch, ch, 5, padding=2)
        self.norm = nn.BatchNorm1d(ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.norm(self.conv2(F.relu(self.conv1(x)))))


class OscillationRegressor(nn.Module):
    def __init__(self, ch: int = 12) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv1d(1, ch, 7, padding=3), ResBlock1d(ch),
                                     ResBlock1d(ch), nn.AdaptiveMaxPool1d(4))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * ch, 32), nn.ReLU(),
                                  nn.Linear(32, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def oscillations(n: int, gen: torch.Generator, length: int = 64):
    t = torch.linspace(0, 4, length)
    damping = 0.2 + 0.8 * torch.rand(n, 1, generator=gen)
    freq = 1.0 + 2.0 * torch.rand(n, 1, generator=gen)
    x = torch.exp(-damping * t) * torch.cos(2 * torch.pi * freq * t)
    x = x + 0.05 * torch.randn(n, length, generator=gen)
    return x.unsqueeze(1), torch.cat([damping, freq], dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-4, help="encoder learning rate")
    parser.add_argument("--head-lr-mult", type=float, default=10.0)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = OscillationRegressor()
    optimizer = torch.optim.Adam([
        {"params": model.encoder.parameters(), "lr": args.lr},
        {"params": model.head.parameters(), "lr": args.lr * args.head_lr_mult},
    ])
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)

    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        x, y = oscillations(args.batch_size, gen)
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        lrs = [f"{g['lr']:.1e}" for g in optimizer.param_groups]
        print(f"step {step} lrs {lrs} loss {loss.item():.4f}")

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
