"""Implicit-feedback recommender: sparse user/item embeddings (SparseAdam) + dense interaction MLP (Adam with
CyclicLR), BPR pairwise loss with sampled negatives."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class TwoTower(nn.Module):
    def __init__(self, n_users, n_items, dim):
        super().__init__()
        self.user_emb = nn.Embedding(n_users, dim, sparse=True)
        self.item_emb = nn.Embedding(n_items, dim, sparse=True)
        self.interact = nn.Sequential(nn.Linear(3 * dim, 32), nn.ReLU(), nn.Linear(32, 1))

    def score(self, u, i):
        eu, ei = self.user_emb(u), self.item_emb(i)
        return self.interact(torch.cat([eu, ei, eu * ei], -1)).squeeze(-1) + (eu * ei).sum(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--emb-dim", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 21)
    n_users, n_items = 200, 300
    model = TwoTower(n_users, n_items, args.emb_dim)
    sparse_params = list(model.user_emb.parameters()) + list(model.item_emb.parameters())
    opt_sparse = torch.optim.SparseAdam(sparse_params, lr=args.lr)
    opt_dense = torch.optim.Adam(model.interact.parameters(), lr=args.lr)
    cyc = torch.optim.lr_scheduler.CyclicLR(opt_dense, base_lr=args.lr / 10, max_lr=args.lr, step_size_up=3,
                                            cycle_momentum=False)
    user_pref = torch.randint(0, 10, (n_users,), generator=g)
    for step in range(args.steps):
        u = torch.randint(0, n_users, (args.batch_size,), generator=g)
        pos = user_pref[u] * 30 + torch.randint(0, 30, (args.batch_size,), generator=g)
        neg = torch.randint(0, n_items, (args.batch_size,), generator=g)
        loss = -F.logsigmoid(model.score(u, pos) - model.score(u, neg)).mean()
        opt_sparse.zero_grad()
        opt_dense.zero_grad()
        loss.backward()
        opt_sparse.step()
        opt_dense.step()
        cyc.step()
        print(f"step {step} bpr {loss.item():.4f} dense_lr {cyc.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
