"""Implicit-feedback matrix factorization with sparse embeddings and two optimizers.

User/item embeddings are nn.Embedding(sparse=True) and are updated with
torch.optim.SparseAdam; the dense part (per-item bias MLP over item
metadata and a global bias) is updated with AdamW. Trained with BPR loss on
(user, positive item, sampled negative item) triples from a synthetic
low-rank preference matrix.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class BPRMatrixFactorization(nn.Module):
    def __init__(self, n_users, n_items, dim, n_meta):
        super().__init__()
        self.user_emb = nn.Embedding(n_users, dim, sparse=True)
        self.item_emb = nn.Embedding(n_items, dim, sparse=True)
        nn.init.normal_(self.user_emb.weight, std=0.1)
        nn.init.normal_(self.item_emb.weight, std=0.1)
        self.meta_bias = nn.Sequential(nn.Linear(n_meta, 16), nn.ReLU(), nn.Linear(16, 1))
        self.global_bias = nn.Parameter(torch.zeros(1))

    def score(self, users, items, item_meta):
        dot = (self.user_emb(users) * self.item_emb(items)).sum(-1)
        return dot + self.meta_bias(item_meta[items]).squeeze(-1) + self.global_bias

    def forward(self, users, pos, neg, item_meta):
        return self.score(users, pos, item_meta), self.score(users, neg, item_meta)


def sample_triples(gen, prefs, batch_size):
    n_users, n_items = prefs.shape
    users = torch.randint(0, n_users, (batch_size,), generator=gen)
    probs = prefs[users].softmax(-1)
    pos = torch.multinomial(probs, 1, generator=gen).squeeze(1)
    neg = torch.randint(0, n_items, (batch_size,), generator=gen)
    return users, pos, neg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--dense-lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--dim", type=int, default=16)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 2)
    n_users, n_items, n_meta = 60, 45, 5
    prefs = 3 * torch.randn(n_users, 4, generator=gen) @ torch.randn(4, n_items, generator=gen) / 2
    item_meta = torch.randn(n_items, n_meta, generator=gen)

    model = BPRMatrixFactorization(n_users, n_items, args.dim, n_meta)
    sparse_params = list(model.user_emb.parameters()) + list(model.item_emb.parameters())
    dense_params = list(model.meta_bias.parameters()) + [model.global_bias]
    sparse_opt = torch.optim.SparseAdam(sparse_params, lr=args.lr)
    dense_opt = torch.optim.AdamW(dense_params, lr=args.dense_lr, weight_decay=1e-4)

    model.train()
    for step in range(args.steps):
        users, pos, neg = sample_triples(gen, prefs, args.batch_size)
        pos_s, neg_s = model(users, pos, neg, item_meta)
        loss = -F.logsigmoid(pos_s - neg_s).mean()
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
        print(f"step {step} bpr {loss.item():.4f} auc-proxy {(pos_s > neg_s).float().mean().item():.2f}")


if __name__ == "__main__":
    main()
