"""Trains a tiny ViT-style patch classifier on synthetic 16x16 images under CPU bf16 autocast.
Bug `autocast-escape`: the last block's MLP runs with autocast disabled on a float32 copy of its
input ("upcast for stability"), so that layer computes in float32 inside the bf16 region.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

UPCAST_MLP_BLOCKS: set[int] = set()


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, index: int) -> None:
        super().__init__()
        self.index = index
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        h = self.norm2(x)
        if self.index in UPCAST_MLP_BLOCKS:
            with torch.autocast("cpu", enabled=False):
                return x + self.mlp(h.float())
        return x + self.mlp(h)


class TinyViT(nn.Module):
    def __init__(self, img: int = 16, patch: int = 4, dim: int = 32, depth: int = 2,
                 heads: int = 4, n_classes: int = 4) -> None:
        super().__init__()
        n_patches = (img // patch) ** 2
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, n_patches + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, i) for i in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x[:, 0]))


def make_batch(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    images = 0.3 * torch.randn(n, 3, 16, 16, generator=gen)
    labels = torch.randint(0, 4, (n,), generator=gen)
    offs = torch.randint(0, 4, (n, 2), generator=gen)
    for b in range(n):
        r = 8 * (labels[b].item() // 2) + offs[b, 0].item()
        c = 8 * (labels[b].item() % 2) + offs[b, 1].item()
        images[b, :, r:r + 4, c:c + 4] += 1.5
    return images, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=24)
    parser.add_argument("--bug", default="none", choices=["none", "autocast-escape"])
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = TinyViT()
    if args.bug == "autocast-escape":
        UPCAST_MLP_BLOCKS.add(len(model.blocks) - 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)

    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        images, labels = make_batch(args.batch_size, gen)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(images)
            loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f} logits {logits.dtype}")

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
