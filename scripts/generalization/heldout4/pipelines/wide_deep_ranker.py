"""Wide & Deep recommender trained on synthetic user/item interaction logs.

The wide part is a linear model over hashed cross-product features; the deep
part embeds user, item and context ids and runs them through an MLP tower.
The two logits are summed and trained with BCE. Weights are initialised by a
model-level init routine (truncated-normal embeddings, Kaiming linears).
"""
import argparse
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class WDConfig:
    n_users: int = 50
    n_items: int = 40
    n_contexts: int = 6
    n_hash_buckets: int = 64
    emb_dim: int = 8
    hidden: int = 32
    tower_self_init: bool = False


def init_weights(module):
    if isinstance(module, nn.Linear):
        nn.init.kaiming_uniform_(module.weight, nonlinearity="relu")
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        nn.init.trunc_normal_(module.weight, std=0.05)


class DeepTower(nn.Module):
    def __init__(self, cfg: WDConfig):
        super().__init__()
        self.user_emb = nn.Embedding(cfg.n_users, cfg.emb_dim)
        self.item_emb = nn.Embedding(cfg.n_items, cfg.emb_dim)
        self.ctx_emb = nn.Embedding(cfg.n_contexts, cfg.emb_dim)
        self.mlp = nn.Sequential(nn.Linear(3 * cfg.emb_dim, cfg.hidden), nn.ReLU(),
                                 nn.Linear(cfg.hidden, cfg.hidden // 2), nn.ReLU(),
                                 nn.Linear(cfg.hidden // 2, 1))
        if cfg.tower_self_init:
            self.apply(init_weights)

    def forward(self, user, item, ctx):
        return self.mlp(torch.cat([self.user_emb(user), self.item_emb(item), self.ctx_emb(ctx)], -1)).squeeze(-1)


class WideLinear(nn.Module):
    def __init__(self, cfg: WDConfig):
        super().__init__()
        self.n_buckets = cfg.n_hash_buckets
        self.weights = nn.EmbeddingBag(cfg.n_hash_buckets, 1, mode="sum")
        self.bias = nn.Parameter(torch.zeros(1))

    def hash_crosses(self, user, item, ctx):
        crosses = torch.stack([user * 31 + item, item * 17 + ctx, user * 7 + ctx], dim=1)
        return crosses % self.n_buckets

    def forward(self, user, item, ctx):
        return self.weights(self.hash_crosses(user, item, ctx)).squeeze(-1) + self.bias


class WideAndDeep(nn.Module):
    def __init__(self, cfg: WDConfig):
        super().__init__()
        self.wide = WideLinear(cfg)
        self.deep = DeepTower(cfg)
        self.apply(init_weights)

    def forward(self, user, item, ctx):
        return self.wide(user, item, ctx) + self.deep(user, item, ctx)


def make_batch(gen, cfg, batch_size, user_factors, item_factors):
    user = torch.randint(0, cfg.n_users, (batch_size,), generator=gen)
    item = torch.randint(0, cfg.n_items, (batch_size,), generator=gen)
    ctx = torch.randint(0, cfg.n_contexts, (batch_size,), generator=gen)
    affinity = (user_factors[user] * item_factors[item]).sum(-1) + 0.3 * (ctx == item % cfg.n_contexts).float()
    clicked = (torch.rand(batch_size, generator=gen) < torch.sigmoid(2 * affinity)).float()
    return user, item, ctx, clicked


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--emb-dim", type=int, default=8)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    cfg = WDConfig(emb_dim=args.emb_dim, hidden=args.hidden,
                   tower_self_init=(args.bug == "double-init"))
    gen = torch.Generator().manual_seed(args.seed + 31)
    user_factors = torch.randn(cfg.n_users, 4, generator=gen)
    item_factors = torch.randn(cfg.n_items, 4, generator=gen)

    model = WideAndDeep(cfg)
    # the sparse wide part learns faster; no weight decay on it
    optimizer = torch.optim.AdamW([
        {"params": model.wide.parameters(), "lr": 5 * args.lr, "weight_decay": 0.0},
        {"params": model.deep.parameters(), "lr": args.lr, "weight_decay": 1e-4},
    ])

    model.train()
    for step in range(args.steps):
        user, item, ctx, clicked = make_batch(gen, cfg, args.batch_size, user_factors, item_factors)
        logits = model(user, item, ctx)
        loss = F.binary_cross_entropy_with_logits(logits, clicked)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
