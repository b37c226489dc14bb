"""Evaluation-only script: rebuilds a small dilated temporal-conv forecaster from an in-memory
"checkpoint" and scores it over a number of synthetic validation batches (no training at all).
"""

from __future__ import annotations

import argparse
import io

import torch
import torch.nn.functional as F
from torch import nn


class Forecaster(nn.Module):
    def __init__(self, channels: int = 16, horizon: int = 4) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv1d(1 if i == 0 else channels, channels, 3, dilation=2 ** i) for i in range(3)
        )
        self.dropout = nn.Dropout(0.1)
        self.proj = nn.Linear(channels, horizon)
        self.horizon = horizon

    def forward(self, history: torch.Tensor) -> torch.Tensor:
        h = history.unsqueeze(1)
        for conv in self.convs:
            h = F.relu(conv(F.pad(h, (2 * conv.dilation[0], 0))))
        return self.proj(self.dropout(h[:, :, -1]))


def make_checkpoint(seed: int) -> bytes:
    torch.manual_seed(seed)
    buf = io.BytesIO()
    torch.save({"model": Forecaster().state_dict(), "epoch": 3}, buf)
    return buf.getvalue()


def series_batch(n: int, length: int, horizon: int, gen: torch.Generator):
    t = torch.arange(length + horizon).float()
    freq = 0.1 + 0.3 * torch.rand(n, 1, generator=gen)
    amp = 0.5 + torch.rand(n, 1, generator=gen)
    x = amp * torch.sin(freq * t) + 0.1 * torch.randn(n, length + horizon, generator=gen)
    return x[:, :length], x[:, length:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8, help="number of evaluation batches")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=48)
    args = parser.parse_args()

    blob = make_checkpoint(args.seed)
    ckpt = torch.load(io.BytesIO(blob), weights_only=True)
    model = Forecaster()
    model.load_state_dict(ckpt["model"])
    model.eval()
    print(f"loaded checkpoint from epoch {ckpt['epoch']}")

    gen = torch.Generator().manual_seed(args.seed + 99)
    total_mse, total_mae, seen = 0.0, 0.0, 0
    with torch.inference_mode():
        for step in range(args.steps):
            history, target = series_batch(args.batch_size, args.length, model.horizon, gen)
            pred = model(history)
            total_mse += F.mse_loss(pred, target, reduction="sum").item()
            total_mae += (pred - target).abs().sum().item()
            seen += target.numel()
            print(f"batch {step} running mse {total_mse / seen:.4f}")

    print(f"eval mae {total_mae / seen:.4f}")
    print(f"final loss {total_mse / seen:.6f}")


if __name__ == "__main__":
    main()
