"""Deep pre-norm MLP-mixer-like token model whose blocks are wrapped in
torch.utils.checkpoint (use_reentrant=False) to trade compute for memory.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class MixerBlock(nn.Module):
    def __init__(self, tokens, dim):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mix = nn.Linear(tokens, tokens)
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mix = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(),
                                         nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.token_mix(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mix(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self, tokens=8, dim=16, depth=3, n_out=3, use_ckpt=True):
        super().__init__()
        self.patch = nn.Linear(4, dim)
        self.blocks = nn.ModuleList(MixerBlock(tokens, dim) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_out)
        self.use_ckpt = use_ckpt

    def forward(self, x):
        x = self.patch(x)
        for blk in self.blocks:
            if self.use_ckpt and self.training:
                x = checkpoint(blk, x, use_reentrant=False)
            else:
                x = blk(x)
        return self.head(self.norm(x).mean(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--depth", type=int, default=3)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = Mixer(depth=args.depth)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)

    model.train()
    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        x = torch.randn(16, 8, 4, generator=gen)
        y = (x.sum(dim=(1, 2)) > 0).long() + (x[:, 0, 0] > 1).long()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
