"""Temporal convolutional network forecasting the next value of synthetic sine mixtures.

Dilated causal conv stack + linear readout, AdamW. --bug optimizer-wrong-params.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalConvBlock(nn.Module):
    def __init__(self, channels: int, dilation: int):
        super().__init__()
        self.pad = 2 * dilation
        self.conv = nn.Conv1d(channels, channels, kernel_size=3, dilation=dilation)
        self.norm = nn.GroupNorm(1, channels)

    def forward(self, x):
        h = self.conv(F.pad(x, (self.pad, 0)))
        return x + F.gelu(self.norm(h))


class TCN(nn.Module):
    def __init__(self, in_ch: int = 1, channels: int = 16, levels: int = 3):
        super().__init__()
        self.stem = nn.Conv1d(in_ch, channels, kernel_size=1)
        self.tcn = nn.Sequential(*[CausalConvBlock(channels, 2**i) for i in range(levels)])
        self.readout = nn.Linear(channels, 1)

    def forward(self, x):
        h = self.tcn(self.stem(x))
        return self.readout(h[:, :, -1])


def make_series(gen, n, length):
    t = torch.arange(length + 1, dtype=torch.float32)
    freq = torch.rand(n, 1, generator=gen) * 0.5 + 0.1
    phase = torch.rand(n, 1, generator=gen) * 6.28
    s = torch.sin(freq * t + phase) + 0.05 * torch.randn(n, length + 1, generator=gen)
    return s[:, None, :-1], s[:, -1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--levels", type=int, default=3)
    ap.add_argument("--bug", default="none", choices=["none", "optimizer-wrong-params"])
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = TCN(levels=args.levels)

    # Wrong: only the conv trunk is handed to the optimizer, readout never moves.
    if args.bug == "optimizer-wrong-params":
        trainable = [p for p in model.tcn.parameters() if p.requires_grad]
        trainable += list(model.stem.parameters())
    else:
        trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.01)

    model.train()
    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        x, y = make_series(gen, args.batch_size, 32)
        pred = model(x)
        loss = F.mse_loss(pred, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
