"""Tiny pre-LN transformer encoder for sequence classification, trained with CPU bf16 autocast.

Task: does the sequence contain more copies of token A than of token B?
"""
import argparse
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class EncConfig:
    vocab: int = 24
    ctx: int = 20
    d: int = 48
    n_head: int = 4
    n_layer: int = 2
    n_cls: int = 2
    dropout: float = 0.0


class SelfAttention(nn.Module):
    def __init__(self, c: EncConfig):
        super().__init__()
        self.qkv = nn.Linear(c.d, 3 * c.d)
        self.proj = nn.Linear(c.d, c.d)
        self.n_head = c.n_head

    def forward(self, x, pad_mask=None):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class FeedForward(nn.Module):
    def __init__(self, c: EncConfig):
        super().__init__()
        self.fc1 = nn.Linear(c.d, 4 * c.d)
        self.fc2 = nn.Linear(4 * c.d, c.d)
        self.full_precision = False   # escape hatch for numerics debugging

    def forward(self, x):
        if self.full_precision:
            with torch.autocast("cpu", enabled=False):
                x = x.float()
                return self.fc2(F.gelu(self.fc1(x)))
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln1 = nn.LayerNorm(c.d)
        self.attn = SelfAttention(c)
        self.ln2 = nn.LayerNorm(c.d)
        self.mlp = FeedForward(c)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Encoder(nn.Module):
    def __init__(self, c: EncConfig):
        super().__init__()
        self.tok = nn.Embedding(c.vocab, c.d)
        self.pos = nn.Parameter(torch.zeros(1, c.ctx, c.d))
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.n_layer)])
        self.ln_f = nn.LayerNorm(c.d)
        self.cls = nn.Linear(c.d, c.n_cls)
        nn.init.normal_(self.pos, std=0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, : idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.cls(self.ln_f(x).mean(1))


def batch(g, n, c: EncConfig):
    idx = torch.randint(2, c.vocab, (n, c.ctx), generator=g)
    na = torch.randint(0, 6, (n,), generator=g)
    nb = torch.randint(0, 6, (n,), generator=g)
    for i in range(n):
        pos = torch.randperm(c.ctx, generator=g)[: na[i] + nb[i]]
        idx[i, pos[: na[i]]] = 0
        idx[i, pos[na[i]:]] = 1
    return idx, (na > nb).long()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--clip", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--bug", default="none")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    cfg = EncConfig()
    model = Encoder(cfg)
    if args.bug == "autocast-escape":
        model.blocks[1].mlp.full_precision = True
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05, betas=(0.9, 0.98))
    sched = None
    if args.warmup > 0:
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / args.warmup) * 0.5 * (1 + math.cos(math.pi * s / args.steps)))
    g = torch.Generator().manual_seed(args.seed + 31)
    amp = torch.autocast("cpu", dtype=torch.bfloat16)

    for step in range(args.steps):
        model.train()
        opt.zero_grad(set_to_none=True)
        losses = []
        for _ in range(args.accum):
            x, y = batch(g, args.batch_size // args.accum, cfg)
            with amp:
                logits = model(x)
            loss = F.cross_entropy(logits.float(), y) / args.accum
            loss.backward()
            losses.append(loss.item())
        if args.clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        if sched is not None:
            sched.step()
        print(f"step {step}: loss {sum(losses):.4f}")

    model.eval()
    xv, yv = batch(torch.Generator().manual_seed(777), 256, cfg)
    with torch.no_grad(), amp:
        acc = (model(xv).argmax(-1) == yv).float().mean().item()
    print(f"eval_acc={acc:.4f}")


if __name__ == "__main__":
    main()
