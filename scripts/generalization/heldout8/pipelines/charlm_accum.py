"""nanoGPT-style char-level causal transformer with gradient accumulation and cosine LR."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, n_head)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab, block, d, n_layer, n_head):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.h = nn.ModuleList([Block(d, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1))
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def get_lr(it, lr, warmup, total):
    if it < warmup:
        return lr * (it + 1) / warmup
    ratio = (it - warmup) / max(1, total - warmup)
    return 0.1 * lr + 0.9 * lr * 0.5 * (1 + math.cos(math.pi * ratio))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--grad-accum", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=32)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    vocab = 27
    g = torch.Generator().manual_seed(args.seed + 7)
    corpus = torch.randint(0, vocab, (4096,), generator=g)

    def get_batch():
        ix = torch.randint(0, len(corpus) - args.block_size - 1, (args.batch_size,), generator=g)
        x = torch.stack([corpus[i:i + args.block_size] for i in ix])
        y = torch.stack([corpus[i + 1:i + 1 + args.block_size] for i in ix])
        return x, y

    model = TinyGPT(vocab, args.block_size, args.n_embd, 2, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = 2
    zero_each_iter = args.bug != "no-zero-grad"
    if not zero_each_iter:
        optimizer.zero_grad(set_to_none=True)  # "clear once up front, accumulation handles the rest"
    X, Y = get_batch()
    for iter_num in range(args.steps):
        lr = get_lr(iter_num, args.lr, warmup, args.steps)
        for pg in optimizer.param_groups:
            pg["lr"] = lr
        for _micro in range(args.grad_accum):
            loss = model(X, Y) / args.grad_accum
            X, Y = get_batch()
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if zero_each_iter:
            optimizer.zero_grad(set_to_none=True)
        print(f"iter {iter_num}: loss {loss.item() * args.grad_accum:.4f}, lr {lr:.2e}")


if __name__ == "__main__":
    main()
