"""Patch-based transformer encoder for multivariate time-series anomaly scoring, with activation checkpointing.

Windows of a 3-channel synthetic sensor signal are split into patches and
embedded; a stack of pre-norm encoder blocks runs with
torch.utils.checkpoint (use_reentrant=False) during training to trade compute
for memory. The model is trained to reconstruct masked patches
(masked-patch modelling); the reconstruction error would serve as the anomaly
score. A linear warm-up then constant LR schedule is used.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class EncoderBlock(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=2):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class PatchTSEncoder(nn.Module):
    def __init__(self, channels, patch, n_patches, dim, depth, heads, use_checkpoint=True):
        super().__init__()
        self.patch, self.use_checkpoint = patch, use_checkpoint
        self.embed = nn.Linear(channels * patch, dim)
        self.pos = nn.Parameter(torch.zeros(1, n_patches, dim))
        self.mask_token = nn.Parameter(torch.zeros(dim))
        self.blocks = nn.ModuleList([EncoderBlock(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.recon = nn.Linear(dim, channels * patch)
        nn.init.trunc_normal_(self.pos, std=0.02)

    def patchify(self, x):  # (B, C, L) -> (B, N, C*P)
        b, c, length = x.shape
        return x.view(b, c, length // self.patch, self.patch).permute(0, 2, 1, 3).reshape(b, length // self.patch, -1)

    def forward(self, x, mask):
        tokens = self.embed(self.patchify(x))
        tokens = torch.where(mask.unsqueeze(-1), self.mask_token.expand_as(tokens), tokens) + self.pos
        for block in self.blocks:
            if self.use_checkpoint and self.training:
                tokens = checkpoint(block, tokens, use_reentrant=False)
            else:
                tokens = block(tokens)
        return self.recon(self.norm(tokens))


def make_batch(gen, batch_size, channels, length):
    t = torch.arange(length).float()
    freqs = 0.05 + 0.1 * torch.rand(batch_size, channels, 1, generator=gen)
    x = torch.sin(2 * math.pi * freqs * t) + 0.1 * torch.randn(batch_size, channels, length, generator=gen)
    # occasional injected spikes (anomalies)
    spikes = torch.rand(batch_size, channels, length, generator=gen) < 0.01
    return x + 3.0 * spikes.float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--mask-ratio", type=float, default=0.3)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 14)
    channels, length, patch = 3, 48, 6
    n_patches = length // patch
    model = PatchTSEncoder(channels, patch, n_patches, args.dim, args.depth, heads=4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / args.warmup))

    model.train()
    for step in range(args.steps):
        x = make_batch(gen, args.batch_size, channels, length)
        mask = torch.rand(args.batch_size, n_patches, generator=gen) < args.mask_ratio
        mask[:, 0] = True  # at least one masked patch per window
        recon = model(x, mask)
        target = model.patchify(x)
        loss = F.mse_loss(recon[mask], target[mask])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        print(f"step {step} masked-mse {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.5f}")


if __name__ == "__main__":
    main()
