"""Trains a Conv-BatchNorm-ReLU CNN on synthetic 3x16x16 striped images under CPU bf16 autocast
(torch.autocast("cpu", dtype=torch.bfloat16)) with Nesterov SGD and a OneCycleLR schedule; BatchNorm running
stats are used for a final eval pass."""
import argparse
import itertools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def conv_bn(c_in, c_out, stride=1):
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class StripeNet(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.body = nn.Sequential(conv_bn(3, 8), conv_bn(8, 16, stride=2), conv_bn(16, 16, stride=2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, n_classes)

    def forward(self, x):
        return self.fc(self.pool(self.body(x)).flatten(1))


def make_stripes(gen, n, size=16, n_classes=4):
    labels = torch.randint(0, n_classes, (n,), generator=gen)
    angle = labels.float() * math.pi / n_classes
    coords = torch.arange(size).float()
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    phase = torch.rand(n, generator=gen) * 2 * math.pi
    proj = xx * torch.cos(angle)[:, None, None] + yy * torch.sin(angle)[:, None, None]
    img = torch.sin(proj * 1.2 + phase[:, None, None])
    img = img.unsqueeze(1).repeat(1, 3, 1, 1) + 0.5 * torch.randn(n, 3, size, size, generator=gen)
    return img, labels


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=24)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    x, y = make_stripes(torch.Generator().manual_seed(args.seed), 288)
    loader = DataLoader(TensorDataset(x[:240], y[:240]), batch_size=args.batch_size, shuffle=True,
                        drop_last=True, generator=torch.Generator().manual_seed(args.seed))
    batches = itertools.cycle(loader)

    model = StripeNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.steps)

    model.train()
    for _step in range(args.steps):
        xb, yb = next(batches)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()

    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        val_acc = (model(x[240:]).argmax(-1) == y[240:]).float().mean().item()
    print(f"val acc {val_acc:.3f}")
    print(f"final loss {loss.float().item():.6f}")


if __name__ == "__main__":
    main()
