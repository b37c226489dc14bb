"""Pre-LN transformer LM with activation checkpointing (torch.utils.checkpoint, non-reentrant),
tied input/output embeddings, AdamW param groups (no decay on norms/biases), linear warmup then decay to zero."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Layer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.norm_a = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm_f = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))

    def forward(self, x, mask):
        h = self.norm_a(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.ff(self.norm_f(x))


class TiedLM(nn.Module):
    def __init__(self, vocab, d, n_layer, heads, max_len):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(max_len, d))
        self.layers = nn.ModuleList([Layer(d, heads) for _ in range(n_layer)])
        self.norm = nn.LayerNorm(d)
        self.unembed = nn.Linear(d, vocab, bias=False)
        self.unembed.weight = self.embed.weight  # weight tying
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, idx, use_ckpt):
        T = idx.size(1)
        mask = torch.triu(torch.full((T, T), float("-inf")), 1)
        x = self.embed(idx) + self.pos[:T]
        for layer in self.layers:
            x = checkpoint(layer, x, mask, use_reentrant=False) if use_ckpt else layer(x, mask)
        return self.unembed(self.norm(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-ckpt", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 8)
    vocab = 48
    model = TiedLM(vocab, 32, args.n_layer, 4, 64)
    decay, no_decay = [], []
    for n, p in model.named_parameters():  # tied weight appears once
        (decay if p.dim() >= 2 and n != "pos" else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr)
    total = args.steps

    def lr_lambda(s):
        if s < args.warmup:
            return (s + 1) / args.warmup
        return max(0.0, (total - s) / max(1, total - args.warmup))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    for step in range(args.steps):
        seq = torch.randint(0, vocab, (args.batch_size, args.seq_len + 1), generator=g)
        seq[:, 1::2] = (seq[:, 0::2][:, :seq[:, 1::2].size(1)] + 1) % vocab
        logits = model(seq[:, :-1], use_ckpt=not args.no_ckpt)
        loss = F.cross_entropy(logits.reshape(-1, vocab), seq[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        print(f"step {step} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
