"""Performer-style linear-attention language model (positive random features) on a synthetic
copy/shift token task, trained under CPU bfloat16 autocast. --bug autocast-escape.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class FavorAttention(nn.Module):
    def __init__(self, dim: int, heads: int, n_features: int, gen: torch.Generator):
        super().__init__()
        self.heads, self.dh = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.register_buffer("omega", torch.randn(self.dh, n_features, generator=gen))

    def feature_map(self, x):
        x = x * self.dh**-0.25
        proj = x @ self.omega.to(x.dtype)
        return torch.exp(proj - x.pow(2).sum(-1, keepdim=True) / 2) / math.sqrt(proj.shape[-1])

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.dh).permute(2, 0, 3, 1, 4)
        qf, kf = self.feature_map(q), self.feature_map(k)
        # causal linear attention via prefix sums
        kv = torch.cumsum(kf.unsqueeze(-1) * v.unsqueeze(-2), dim=2)
        num = (qf.unsqueeze(-2) @ kv).squeeze(-2)
        den = (qf * torch.cumsum(kf, dim=2)).sum(-1, keepdim=True) + 1e-4
        y = (num / den).transpose(1, 2).reshape(b, t, d)
        return self.out(y)


class Block(nn.Module):
    def __init__(self, dim, heads, n_features, gen, fp32_mlp=False):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = FavorAttention(dim, heads, n_features, gen)
        self.fc_in = nn.Linear(dim, 2 * dim)
        self.fc_out = nn.Linear(2 * dim, dim)
        self.fp32_mlp = fp32_mlp

    def mlp(self, h):
        return self.fc_out(F.gelu(self.fc_in(h)))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        if self.fp32_mlp:
            with torch.autocast("cpu", enabled=False):
                return x + self.mlp(self.ln2(x).float())
        return x + self.mlp(self.ln2(x))


class PerformerLM(nn.Module):
    def __init__(self, vocab, dim, depth, seq_len, gen, fp32_mlp_block=-1):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, dim))
        self.blocks = nn.ModuleList(
            Block(dim, 2, 16, gen, fp32_mlp=(i == fp32_mlp_block)) for i in range(depth)
        )
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, : idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=24)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--bug", default="none", choices=["none", "autocast-escape"])
    args = ap.parse_args()

    vocab = 32
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    escape = 1 if args.bug == "autocast-escape" else -1
    model = PerformerLM(vocab, 32, args.depth, args.seq_len, gen, fp32_mlp_block=escape)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95))

    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        src = torch.randint(0, vocab, (args.batch_size, args.seq_len + 1), generator=gen)
        src[:, 1::2] = src[:, 0:-1:2]  # every odd token repeats its predecessor
        inp, tgt = src[:, :-1], src[:, 1:]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(inp)
            loss = F.cross_entropy(logits.float().reshape(-1, vocab), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
