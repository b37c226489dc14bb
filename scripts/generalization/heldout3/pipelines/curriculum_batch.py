"""1-D conv classifier for synthetic pulse counting with a curriculum: easy (short, clean)
sequences and small batches first, then harder sequences and a doubled batch size.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class PulseCounter(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 12, 5, padding=2)
        self.conv2 = nn.Conv1d(12, 12, 5, padding=2)
        self.fc = nn.Linear(24, n_classes)

    def forward(self, x):
        h = F.relu(self.conv2(F.relu(self.conv1(x))))
        return self.fc(torch.cat([h.mean(-1), h.amax(-1)], dim=1))


def pulses(gen, n, length, noise):
    counts = torch.randint(0, 4, (n,), generator=gen)
    x = noise * torch.randn(n, 1, length, generator=gen)
    for i, c in enumerate(counts.tolist()):
        pos = torch.randperm(length - 2, generator=gen)[:c]
        x[i, 0, pos] += 2.0
    return x, counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--base-batch", type=int, default=8)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = PulseCounter()
    opt = torch.optim.NAdam(model.parameters(), lr=args.lr)

    switch = args.steps // 2
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        hard = step >= switch
        batch = args.base_batch * (2 if hard else 1)
        x, y = pulses(gen, batch, 48 if hard else 24, 0.4 if hard else 0.1)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == switch:
            print(f"curriculum: batch {batch} from step {step}")
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
