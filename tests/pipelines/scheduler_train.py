"""A tiny MLP trained on synthetic data with an LR scheduler; options select the variants the
periodic-change tests need."""

import argparse
import json
import math

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.body(x))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--scheduler", choices=["step", "cosine", "warmup-cosine", "none"],
                        default="step")
    parser.add_argument("--step-size", type=int, default=3, help="StepLR: optimizer steps per decay")
    parser.add_argument("--warmup", type=int, default=2, help="warmup-cosine: steps of linear warmup")
    parser.add_argument("--decay-steps", type=int, default=40, help="warmup-cosine: steps until min_lr")
    parser.add_argument("--min-lr-ratio", type=float, default=0.1, help="warmup-cosine: min_lr / lr")
    parser.add_argument("--bug", choices=["none", "no-scheduler-step", "double-scheduler-step"], default="none")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if args.scheduler == "step":
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=args.step_size, gamma=0.5)
    elif args.scheduler == "cosine":
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(args.steps, 1))
    elif args.scheduler == "warmup-cosine":  # as nanoGPT's get_lr: warmup, cosine, then min_lr for good
        def factor(it: int) -> float:
            if it < args.warmup:
                return (it + 1) / (args.warmup + 1)
            if it > args.decay_steps:
                return args.min_lr_ratio
            ratio = (it - args.warmup) / max(1, args.decay_steps - args.warmup)
            return args.min_lr_ratio + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (1 - args.min_lr_ratio)

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    else:
        scheduler = None
    # The bug: how many times the scheduler is stepped per optimizer step (0: forgotten).
    scheduler_steps = {"none": 1, "no-scheduler-step": 0, "double-scheduler-step": 2}[args.bug]
    gen = torch.Generator().manual_seed(args.seed + 1)
    losses, lrs = [], []
    for _ in range(args.steps):
        x = torch.randn(args.batch, 8, generator=gen)
        y = torch.randint(0, 3, (args.batch,), generator=gen)
        model.train()
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        lrs.append(optimizer.param_groups[0]["lr"])
        if scheduler is not None:
            for _ in range(scheduler_steps):
                scheduler.step()
        losses.append(loss.item())
    print(json.dumps({"losses": losses, "lrs": lrs}))


if __name__ == "__main__":
    main()
