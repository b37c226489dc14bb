"""Bag-of-tokens sentiment-like classifier whose embedding table is loaded from a fixed
"pretrained" tensor via nn.Embedding.from_pretrained(freeze=True); only the head trains.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM = 50, 16


class BagClassifier(nn.Module):
    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.embed = nn.Embedding.from_pretrained(table, freeze=True, padding_idx=0)
        self.attn_score = nn.Linear(DIM, 1)
        self.head = nn.Sequential(nn.Linear(DIM, 24), nn.ReLU(), nn.Linear(24, 2))

    def forward(self, tokens):
        e = self.embed(tokens)
        score = self.attn_score(e).squeeze(-1).masked_fill(tokens == 0, -1e4)
        pooled = (torch.softmax(score, dim=1).unsqueeze(-1) * e).sum(1)
        return self.head(pooled)


def sample(gen, n, length=12):
    tokens = torch.randint(1, VOCAB, (n, length), generator=gen)
    lengths = torch.randint(4, length + 1, (n,), generator=gen)
    tokens[torch.arange(length)[None, :] >= lengths[:, None]] = 0
    pos = ((tokens >= 1) & (tokens < 10)).sum(1)
    neg = ((tokens >= 10) & (tokens < 19)).sum(1)
    return tokens, (pos > neg).long()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    pretrained = torch.randn(VOCAB, DIM, generator=torch.Generator().manual_seed(1234))
    pretrained[0] = 0.0
    model = BagClassifier(pretrained)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=args.lr)

    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        tokens, labels = sample(gen, args.batch_size)
        loss = F.cross_entropy(model(tokens), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
