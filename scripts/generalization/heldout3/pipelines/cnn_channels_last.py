"""Small VGG-style CNN on synthetic stripe-orientation images, with the model and inputs in
torch.channels_last memory format. Adam + step LR decay.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class StripeNet(nn.Module):
    def __init__(self, n_classes=3):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, 8), conv_bn(8, 8), nn.MaxPool2d(2), conv_bn(8, 16), nn.MaxPool2d(2)
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 4 * 4, 32), nn.ReLU(),
                                        nn.Linear(32, n_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def stripes(gen, n):
    y = torch.randint(0, 3, (n,), generator=gen)
    grid = torch.arange(16.0)
    horiz = torch.sin(grid)[:, None].expand(16, 16)
    vert = horiz.t()
    diag = torch.sin(grid[:, None] + grid[None, :])
    pats = torch.stack([horiz, vert, diag])[y]
    x = pats[:, None] + 0.5 * torch.randn(n, 1, 16, 16, generator=gen)
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = StripeNet().to(memory_format=torch.channels_last)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)

    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        x, y = stripes(gen, args.batch_size)
        x = x.contiguous(memory_format=torch.channels_last)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
