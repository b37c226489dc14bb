"""Tiny Vision Transformer (patch embedding + pre-norm attention blocks + CLS token) on synthetic 16x16 images."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyViT(nn.Module):
    def __init__(self, img=16, patch=4, dim=32, depth=2, heads=4, n_classes=5):
        super().__init__()
        self.patch_embed = nn.Conv2d(1, dim, kernel_size=patch, stride=patch)
        n_patches = (img // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, n_patches + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x[:, 0]))


def synthetic_images(n, n_classes, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, n_classes, (n,), generator=g)
    images = torch.randn(n, 1, 16, 16, generator=g) * 0.5
    for c in range(n_classes):
        images[labels == c, :, c * 3:c * 3 + 3, :] += 1.5
    return images, labels


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--bug", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = TinyViT(dim=args.dim)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(args.steps, 1))
    images, labels = synthetic_images(args.steps * args.batch_size, 5, args.seed)

    model.train()
    optimizer.zero_grad(set_to_none=True)
    for step in range(args.steps):
        sl = slice(step * args.batch_size, (step + 1) * args.batch_size)
        loss = F.cross_entropy(model(images[sl]), labels[sl])
        loss.backward()
        optimizer.step()
        scheduler.step()
        if args.bug != "no-zero-grad":
            optimizer.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")
    return model


if __name__ == "__main__":
    main()
