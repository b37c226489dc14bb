"""Trains a 1-D conv keyword-spotting style classifier on synthetic noisy tone waveforms.
Bug `no-zero-grad`: the gradient reset after the optimizer step is dropped (zero_grad runs only
once, before the loop), so gradients accumulate from one iteration to the next.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

SAMPLE_RATE = 800
N_SAMPLES = 400
N_CLASSES = 5


def synth_batch(batch_size: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, N_CLASSES, (batch_size,), generator=gen)
    freqs = 40.0 + 30.0 * labels.float() + 4.0 * torch.randn(batch_size, generator=gen)
    phase = 2 * math.pi * torch.rand(batch_size, 1, generator=gen)
    t = torch.arange(N_SAMPLES).float() / SAMPLE_RATE
    wave = torch.sin(2 * math.pi * freqs[:, None] * t[None, :] + phase)
    envelope = torch.hann_window(N_SAMPLES, periodic=False)[None, :]
    noise = 0.4 * torch.randn(batch_size, N_SAMPLES, generator=gen)
    return (wave * envelope + noise).unsqueeze(1), labels


class ConvBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, stride=stride, padding=kernel // 2)
        self.bn = nn.BatchNorm1d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class AudioNet(nn.Module):
    def __init__(self, n_classes: int = N_CLASSES, width: int = 16) -> None:
        super().__init__()
        self.frontend = ConvBlock(1, width, kernel=31, stride=4)
        self.stage1 = ConvBlock(width, width * 2, kernel=9, stride=2)
        self.stage2 = ConvBlock(width * 2, width * 2, kernel=9, stride=2)
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.classifier = nn.Linear(width * 2, n_classes)

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        h = self.stage2(self.stage1(self.frontend(wav)))
        return self.classifier(self.pool(h).squeeze(-1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    parser.add_argument("--bug", default="none", choices=["none", "no-zero-grad"])
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(1000 + args.seed)
    model = AudioNet()
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * 10, momentum=0.9)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    optimizer.zero_grad()
    running = 0.0
    for step in range(args.steps):
        running = 0.0
        for _ in range(args.accum):
            wav, label = synth_batch(args.batch_size, gen)
            loss = F.cross_entropy(model(wav), label) / args.accum
            loss.backward()
            running += loss.item()
        optimizer.step()
        if args.bug != "no-zero-grad":
            optimizer.zero_grad()
        print(f"step {step} loss {running:.4f}")

    print(f"final loss {running:.6f}")


if __name__ == "__main__":
    main()
