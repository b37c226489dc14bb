"""Deep highway network classifier using activation (gradient) checkpointing on every block, trained with ASGD."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class HighwayBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.transform = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, dim)
        nn.init.constant_(self.gate.bias, -1.0)

    def forward(self, x):
        t = torch.sigmoid(self.gate(x))
        return t * F.relu(self.transform(x)) + (1 - t) * x


class HighwayNet(nn.Module):
    def __init__(self, in_dim, dim, depth, n_classes, use_checkpoint=True):
        super().__init__()
        self.inp = nn.Linear(in_dim, dim)
        self.blocks = nn.ModuleList(HighwayBlock(dim) for _ in range(depth))
        self.out = nn.Linear(dim, n_classes)
        self.use_checkpoint = use_checkpoint

    def forward(self, x):
        h = self.inp(x)
        for blk in self.blocks:
            h = checkpoint(blk, h, use_reentrant=False) if self.use_checkpoint and self.training else blk(h)
        return self.out(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--depth", type=int, default=6)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = HighwayNet(10, 32, args.depth, 3)
    optimizer = torch.optim.ASGD(model.parameters(), lr=args.lr, t0=3)
    g = torch.Generator().manual_seed(args.seed)
    model.train()
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 10, generator=g)
        y = (x[:, :3].sum(1) > 0).long() + (x[:, 3] > 1).long()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
