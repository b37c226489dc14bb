"""Trains a next-item recommender that mean-pools a user's padded item history through an
nn.Embedding with padding_idx=0 (the padding row stays zero and gets no gradient) and scores
all items against a separate candidate embedding table; full softmax over the catalogue.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

N_ITEMS = 120  # item ids 1..N_ITEMS-1, 0 is padding
MAX_HIST = 10


class HistoryRecommender(nn.Module):
    def __init__(self, n_items: int = N_ITEMS, dim: int = 24) -> None:
        super().__init__()
        self.item_emb = nn.Embedding(n_items, dim, padding_idx=0)
        self.tower = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.cand_emb = nn.Embedding(n_items, dim)
        self.item_bias = nn.Parameter(torch.zeros(n_items))

    def forward(self, history: torch.Tensor) -> torch.Tensor:
        mask = (history != 0).float().unsqueeze(-1)
        pooled = (self.item_emb(history) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        user = self.tower(pooled)
        return user @ self.cand_emb.weight.t() + self.item_bias


def make_batch(n: int, genre_of: torch.Tensor, gen: torch.Generator):
    hist = torch.zeros(n, MAX_HIST, dtype=torch.long)
    lengths = torch.randint(2, MAX_HIST + 1, (n,), generator=gen)
    genres = torch.randint(0, 6, (n,), generator=gen)
    targets = torch.empty(n, dtype=torch.long)
    for i in range(n):
        pool = (genre_of == genres[i]).nonzero(as_tuple=True)[0]
        picks = pool[torch.randint(0, pool.numel(), (int(lengths[i]) + 1,), generator=gen)]
        hist[i, : int(lengths[i])] = picks[:-1]
        targets[i] = picks[-1]
    return hist, targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    genre_of = torch.randint(0, 6, (N_ITEMS,), generator=gen)
    genre_of[0] = -1  # the padding id belongs to no genre
    for g in range(6):  # make sure every genre has items
        genre_of[1 + g] = g

    model = HistoryRecommender()
    optimizer = torch.optim.Adagrad(model.parameters(), lr=args.lr)

    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        hist, target = make_batch(args.batch_size, genre_of, gen)
        loss = F.cross_entropy(model(hist), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")

    pad_norm = model.item_emb.weight[0].norm().item()
    print(f"padding row norm {pad_norm:.3g}")
    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
