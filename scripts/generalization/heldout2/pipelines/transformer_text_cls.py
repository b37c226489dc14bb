"""Trains a hand-written transformer encoder (attention dropout) to classify synthetic token
sequences by their most frequent marker token, validating every few steps. Bug `dropout-in-eval`:
the attention dropout is called with training=True hard-coded, so it stays active in validation.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

BUG = "none"
VOCAB, N_MARKERS, SEQ_LEN = 50, 4, 24


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, attn_dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.attn_dropout = attn_dropout

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(pad_mask[:, None, None, :], float("-inf"))
        attn = scores.softmax(dim=-1)
        drop_active = True if BUG == "dropout-in-eval" else self.training
        attn = F.dropout(attn, self.attn_dropout, training=drop_active)
        out = (attn @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(out)


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(4 * dim, dim)
        )

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), pad_mask)
        return x + self.ff(self.ln2(x))


class TextClassifier(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, depth: int = 2, dropout: float = 0.2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim, padding_idx=0)
        self.pos = nn.Embedding(SEQ_LEN, dim)
        self.blocks = nn.ModuleList(EncoderBlock(dim, heads, dropout) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim)
        self.cls = nn.Linear(dim, N_MARKERS)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pad_mask = tokens == 0
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))[None]
        for blk in self.blocks:
            x = blk(x, pad_mask)
        x = self.ln_f(x).masked_fill(pad_mask[..., None], 0.0)
        pooled = x.sum(1) / (~pad_mask).sum(1, keepdim=True).clamp(min=1)
        return self.cls(pooled)


def make_split(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(N_MARKERS + 1, VOCAB, (n, SEQ_LEN), generator=gen)
    labels = torch.randint(0, N_MARKERS, (n,), generator=gen)
    for i in range(n):
        length = int(torch.randint(SEQ_LEN // 2, SEQ_LEN + 1, (1,), generator=gen))
        perm = torch.randperm(length, generator=gen)
        n_major = int(torch.randint(3, 6, (1,), generator=gen))
        n_minor = int(torch.randint(0, 3, (1,), generator=gen))
        other = (labels[i] + int(torch.randint(1, N_MARKERS, (1,), generator=gen))) % N_MARKERS
        tokens[i, perm[:n_major]] = labels[i] + 1
        tokens[i, perm[n_major:n_major + n_minor]] = other + 1
        tokens[i, length:] = 0
    return tokens, labels


@torch.no_grad()
def evaluate(model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    model.eval()
    logits = model(tokens)
    loss = F.cross_entropy(logits, labels).item()
    acc = (logits.argmax(-1) == labels).float().mean().item()
    model.train()
    return loss, acc


def main() -> None:
    global BUG
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--eval-every", type=int, default=3)
    parser.add_argument("--bug", default="none", choices=["none", "dropout-in-eval"])
    args = parser.parse_args()
    BUG = args.bug

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    train_x, train_y = make_split(512, gen)
    val_x, val_y = make_split(128, gen)

    model = TextClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        if step > 0 and step % args.eval_every == 0:
            val_loss, val_acc = evaluate(model, val_x, val_y)
            print(f"step {step} val loss {val_loss:.4f} acc {val_acc:.3f}")
        idx = torch.randint(0, train_x.shape[0], (args.batch_size,), generator=gen)
        loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")

    val_loss, val_acc = evaluate(model, val_x, val_y)
    print(f"final val loss {val_loss:.4f} acc {val_acc:.3f}")
    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
