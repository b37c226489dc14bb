"""A residual MLP trained with stochastic depth: in training, each block is skipped for the
whole batch with probability ``--drop-prob`` (a seeded draw), so on some steps a block's
parameters get no grad at all. Adam over every parameter; ``--freeze-first`` freezes the first
block with ``requires_grad_(False)`` and still hands every parameter to the optimizer, as many
fine-tuning scripts do."""

import argparse
import json

import torch
from torch import nn


class ResidualNet(nn.Module):
    def __init__(self, width: int = 16, blocks: int = 3, drop_prob: float = 0.0, seed: int = 0) -> None:
        super().__init__()
        self.stem = nn.Linear(8, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(blocks))
        self.out = nn.Linear(width, 1)
        self.drop_prob = drop_prob
        self.coin = torch.Generator().manual_seed(seed + 7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        for block in self.blocks:
            if self.training and torch.rand((), generator=self.coin).item() < self.drop_prob:
                continue  # the whole block is skipped for this batch
            h = h + block(h)
        return self.out(h)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--drop-prob", type=float, default=0.0)
    parser.add_argument("--freeze-first", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = ResidualNet(drop_prob=args.drop_prob, seed=args.seed)
    if args.freeze_first:
        model.blocks[0].requires_grad_(False)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(256, 8, generator=gen)
    y = x[:, :1] * 2 - x[:, 1:2]
    losses = []
    for step in range(args.steps):
        batch = slice(32 * step % 256, 32 * step % 256 + 32)  # batches sliced by hand
        model.train()
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x[batch]), y[batch])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
