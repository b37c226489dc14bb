"""Small residual CNN classifying synthetic 16x16 blob images into 4 classes.

SGD with momentum and a cosine LR schedule. --bug no-zero-grad.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class MiniResNet(nn.Module):
    def __init__(self, num_classes: int = 4, width: int = 8):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width))
        self.layer1 = BasicBlock(width, width, 1)
        self.layer2 = BasicBlock(width, 2 * width, 2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def sample_batch(gen, n):
    labels = torch.randint(0, 4, (n,), generator=gen)
    imgs = 0.3 * torch.randn(n, 3, 16, 16, generator=gen)
    for i, c in enumerate(labels.tolist()):
        r, q = divmod(c, 2)
        imgs[i, :, r * 8 : r * 8 + 8, q * 8 : q * 8 + 8] += 1.0
    return imgs, labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--bug", default="none", choices=["none", "no-zero-grad"])
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    net = MiniResNet()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, nesterov=True)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(args.steps, 1))

    net.train()
    loss = torch.tensor(0.0)
    for it in range(args.steps):
        images, targets = sample_batch(gen, args.batch_size)
        # The bug: gradients only cleared once, before the first iteration.
        if args.bug != "no-zero-grad" or it == 0:
            opt.zero_grad(set_to_none=True)
        logits = net(images)
        loss = F.cross_entropy(logits, targets)
        loss.backward()
        opt.step()
        sched.step()
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
