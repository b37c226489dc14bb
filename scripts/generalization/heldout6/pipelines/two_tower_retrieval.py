"""Two-tower retrieval model (query tower + item tower) trained with in-batch negatives."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Tower(nn.Module):
    def __init__(self, n_tokens, dim, out_dim):
        super().__init__()
        self.embed = nn.EmbeddingBag(n_tokens, dim, mode="mean")
        self.proj = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, out_dim))

    def forward(self, tokens):
        return F.normalize(self.proj(self.embed(tokens)), dim=-1)


class TwoTower(nn.Module):
    def __init__(self, n_queries, n_items, dim, out_dim):
        super().__init__()
        self.query_tower = Tower(n_queries, dim, out_dim)
        self.item_tower = Tower(n_items, dim, out_dim)
        self.log_temp = nn.Parameter(torch.tensor(2.0))

    def forward(self, q, it):
        qv = self.query_tower(q)
        iv = self.item_tower(it)
        return qv @ iv.t() * self.log_temp.exp()


def trainable_groups(model, cfg):
    groups = [{"params": list(model.query_tower.parameters()), "weight_decay": cfg["wd"]},
              {"params": [model.log_temp], "weight_decay": 0.0}]
    # item tower is optionally warm-started and frozen for the first epoch
    if not cfg["item_tower_frozen"]:
        groups[0]["params"] += list(model.item_tower.parameters())
    return groups


def make_pairs(gen, n, n_queries, n_items, length):
    q = torch.randint(0, n_queries, (n, length), generator=gen)
    it = (q * 7 + 3) % n_items
    noise = torch.randint(0, n_items, (n, length), generator=gen)
    mask = torch.rand(n, length, generator=gen) < 0.2
    it = torch.where(mask, noise, it)
    return q, it


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--bug", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    model = TwoTower(50, 60, args.dim, 16)
    cfg = {"wd": 1e-4, "item_tower_frozen": args.bug == "optimizer-wrong-params"}
    opt = torch.optim.AdamW(trainable_groups(model, cfg), lr=args.lr)
    q_all, it_all = make_pairs(gen, 512, 50, 60, 5)

    for step in range(args.steps):
        idx = torch.randint(0, q_all.shape[0], (args.batch_size,), generator=gen)
        logits = model(q_all[idx], it_all[idx])
        labels = torch.arange(args.batch_size)
        loss = 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
