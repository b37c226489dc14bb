"""Tiny ViT on synthetic shape images under CPU bf16 autocast, with an EMA copy of the weights.

Precision policy: patch embedding + encoder in bf16; the final LayerNorm and classifier head are
deliberately run in float32 (autocast disabled locally). The EMA model is updated under
torch.no_grad() after every optimizer step and evaluated with torch.no_grad(). Plain
Adam + ReduceLROnPlateau on the EMA validation loss.
"""
from __future__ import annotations

import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


class FP32Head(nn.Module):
    def __init__(self, d, n_cls):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc = nn.Linear(d, n_cls)

    def forward(self, x):
        with torch.autocast("cpu", enabled=False):
            return self.fc(self.norm(x.float()))


class TinyViT(nn.Module):
    def __init__(self, img=12, patch=3, d=32, depth=2, n_cls=3):
        super().__init__()
        self.patch_embed = nn.Conv2d(1, d, patch, patch)
        n = (img // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.1, batch_first=True, norm_first=True,
                                           activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = FP32Head(d, n_cls)

    def forward(self, x):
        t = self.patch_embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls_token.expand(len(t), -1, -1), t], 1) + self.pos
        return self.head(self.encoder(t)[:, 0])


def shapes(gen, n, img=12):
    y = torch.randint(0, 3, (n,), generator=gen)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, img), torch.linspace(-1, 1, img), indexing="ij")
    r = 0.4 + 0.3 * torch.rand(n, 1, 1, generator=gen)
    circle = (xx**2 + yy**2 < r**2).float()
    square = ((xx.abs() < r) & (yy.abs() < r)).float()
    cross = ((xx.abs() < 0.15) | (yy.abs() < 0.15)).float().expand(n, -1, -1)
    x = torch.where(y[:, None, None] == 0, circle, torch.where(y[:, None, None] == 1, square, cross))
    return (x + 0.3 * torch.randn(n, img, img, generator=gen)).unsqueeze(1), y


@torch.no_grad()
def ema_update(ema, model, decay):
    for pe, pm in zip(ema.parameters(), model.parameters(), strict=True):
        pe.lerp_(pm, 1 - decay)
    for be, bm in zip(ema.buffers(), model.buffers(), strict=True):
        be.copy_(bm)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--ema-decay", type=float, default=0.9)
    ap.add_argument("--eval-every", type=int, default=4)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    xtr, ytr = shapes(gen, 512)
    xva, yva = shapes(gen, 128)
    model = TinyViT(d=args.dim)
    ema = copy.deepcopy(model).requires_grad_(False).eval()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=1)

    order = torch.randperm(len(xtr), generator=gen)
    model.train()
    for step in range(args.steps):
        lo = (step * args.batch_size) % (len(xtr) - args.batch_size)
        idx = order[lo:lo + args.batch_size]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(xtr[idx])
        loss = F.cross_entropy(logits, ytr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        ema_update(ema, model, args.ema_decay)
        if (step + 1) % args.eval_every == 0:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                vlogits = ema(xva)
            vloss = F.cross_entropy(vlogits, yva).item()
            plateau.step(vloss)
            acc = (vlogits.argmax(1) == yva).float().mean().item()
            print(f"step {step} loss {loss.item():.4f} ema_val_loss {vloss:.4f} ema_val_acc {acc:.3f}")


if __name__ == "__main__":
    main()
