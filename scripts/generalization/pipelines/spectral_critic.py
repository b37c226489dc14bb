"""Trains a spectrally-normalised Conv1d critic (torch.nn.utils.spectral_norm) to tell noisy sine waves
from coloured noise, validating every few steps. Bug `spectral-eval-first`: a Lightning-style sanity
validation pass runs in eval mode before the first training forward, before any power iteration ran."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import spectral_norm


class Critic(nn.Module):
    def __init__(self, length=32):
        super().__init__()
        self.conv1 = spectral_norm(nn.Conv1d(1, 12, kernel_size=5, padding=2))
        self.conv2 = spectral_norm(nn.Conv1d(12, 16, kernel_size=5, stride=2, padding=2))
        self.fc = spectral_norm(nn.Linear(16 * (length // 2), 1))

    def forward(self, x):
        h = F.leaky_relu(self.conv1(x), 0.2)
        h = F.leaky_relu(self.conv2(h), 0.2)
        return self.fc(h.flatten(1)).squeeze(-1)


def make_signals(gen, n, length=32):
    t = torch.linspace(0, 1, length)
    freq = 1.0 + 3.0 * torch.rand(n, 1, generator=gen)
    phase = 2 * math.pi * torch.rand(n, 1, generator=gen)
    sines = torch.sin(2 * math.pi * freq * t + phase) + 0.3 * torch.randn(n, length, generator=gen)
    noise = torch.cumsum(0.3 * torch.randn(n, length, generator=gen), dim=1)
    x = torch.cat([sines, noise]).unsqueeze(1)
    y = torch.cat([torch.ones(n), torch.zeros(n)])
    return x, y


@torch.no_grad()
def evaluate(model, x, y, batch_size=64, max_batches=None):
    model.eval()
    total, count = 0.0, 0
    for i, start in enumerate(range(0, len(x), batch_size)):
        if max_batches is not None and i >= max_batches:
            break
        logits = model(x[start:start + batch_size])
        total += F.binary_cross_entropy_with_logits(logits, y[start:start + batch_size], reduction="sum").item()
        count += len(logits)
    model.train()
    return total / count


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--val-every", type=int, default=3)
    p.add_argument("--bug", choices=["none", "spectral-eval-first"], default="none")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    x_train, y_train = make_signals(gen, 256)
    x_val, y_val = make_signals(gen, 64)

    model = Critic()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.5, 0.9))

    num_sanity_val_batches = 2 if args.bug == "spectral-eval-first" else 0
    if num_sanity_val_batches:
        print(f"sanity val loss {evaluate(model, x_val, y_val, max_batches=num_sanity_val_batches):.4f}")

    model.train()
    for step in range(args.steps):
        idx = torch.randint(0, len(x_train), (args.batch_size,), generator=gen)
        logits = model(x_train[idx])
        loss = F.binary_cross_entropy_with_logits(logits, y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % args.val_every == 0:
            print(f"step {step} val loss {evaluate(model, x_val, y_val):.4f}")

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
