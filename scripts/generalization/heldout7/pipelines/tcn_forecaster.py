"""Temporal convolutional network (TCN) forecasting the next few values of synthetic sensor series.

AdamW with separate decay / no-decay parameter groups and a OneCycle schedule; hand-sliced
mini-batches from a pre-generated window tensor, reshuffled every epoch.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

BUG_CHOICES = ["optimizer-wrong-params"]

# which submodules make up each optimiser group (the input projection belongs to the backbone)
GROUP_LAYOUT = {
    "backbone": ("input_proj", "blocks"),
    "head": ("readout",),
}


class CausalConv1d(nn.Conv1d):
    def __init__(self, cin: int, cout: int, kernel: int, dilation: int):
        super().__init__(cin, cout, kernel, dilation=dilation)
        self.left_pad = (kernel - 1) * dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.left_pad, 0)))


class TemporalBlock(nn.Module):
    def __init__(self, ch: int, kernel: int, dilation: int, dropout: float):
        super().__init__()
        self.conv_a = CausalConv1d(ch, ch, kernel, dilation)
        self.conv_b = CausalConv1d(ch, ch, kernel, dilation)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = self.drop(F.gelu(self.conv_a(x)))
        h = self.drop(F.gelu(self.conv_b(h)))
        return x + h


class TCN(nn.Module):
    def __init__(self, n_series: int, hidden: int, horizon: int, levels: int = 3, kernel: int = 3):
        super().__init__()
        self.input_proj = nn.Conv1d(n_series, hidden, 1)
        self.blocks = nn.ModuleList(TemporalBlock(hidden, kernel, 2**i, 0.05) for i in range(levels))
        self.readout = nn.Linear(hidden, horizon * n_series)
        self.horizon, self.n_series = horizon, n_series

    def forward(self, x):  # x: (B, n_series, T)
        h = self.input_proj(x)
        for blk in self.blocks:
            h = blk(h)
        out = self.readout(h[:, :, -1])
        return out.view(-1, self.n_series, self.horizon)


def make_windows(gen: torch.Generator, n: int, n_series: int, window: int, horizon: int):
    t = torch.arange(window + horizon, dtype=torch.float32)
    freq = 0.05 + 0.25 * torch.rand(n, n_series, 1, generator=gen)
    phase = 6.28 * torch.rand(n, n_series, 1, generator=gen)
    amp = 0.5 + torch.rand(n, n_series, 1, generator=gen)
    series = amp * torch.sin(freq * t + phase) + 0.05 * torch.randn(n, n_series, t.numel(), generator=gen)
    return series[..., :window], series[..., window:]


def build_param_groups(model: nn.Module, layout, weight_decay: float, head_lr_mult: float, lr: float):
    groups = []
    for name, submodules in layout.items():
        decay, no_decay = [], []
        for sub in submodules:
            for pname, p in getattr(model, sub).named_parameters():
                (no_decay if pname.endswith("bias") else decay).append(p)
        mult = head_lr_mult if name == "head" else 1.0
        groups.append({"params": decay, "weight_decay": weight_decay, "lr": lr * mult})
        groups.append({"params": no_decay, "weight_decay": 0.0, "lr": lr * mult})
    return groups


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bug", choices=BUG_CHOICES, default=None)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=24)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    n_series, window, horizon = 3, 48, 6
    xs, ys = make_windows(gen, 256, n_series, window, horizon)

    model = TCN(n_series, args.hidden, horizon)
    layout = dict(GROUP_LAYOUT)
    if args.bug == "optimizer-wrong-params":
        # refactor of the group table: "backbone" now lists only the residual stack
        layout["backbone"] = ("blocks",)
    optimizer = torch.optim.AdamW(build_param_groups(model, layout, 1e-2, 2.0, args.lr))
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=[g["lr"] for g in optimizer.param_groups], total_steps=max(args.steps, 2),
        pct_start=0.3,
    )

    step, epoch, losses = 0, 0, []
    model.train()
    while step < args.steps:
        perm = torch.randperm(xs.shape[0], generator=gen)
        for start in range(0, xs.shape[0] - args.batch_size + 1, args.batch_size):
            idx = perm[start:start + args.batch_size]
            pred = model(xs[idx])
            loss = F.smooth_l1_loss(pred, ys[idx], beta=0.1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            print(f"epoch {epoch} step {step} loss {loss.item():.5f}")
            step += 1
            if step >= args.steps:
                break
        epoch += 1
    if args.save:
        torch.save({"state": model.state_dict(), "losses": losses}, args.save)


if __name__ == "__main__":
    main()
