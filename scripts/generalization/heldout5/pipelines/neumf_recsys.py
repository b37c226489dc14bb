"""Neural collaborative filtering (NeuMF: GMF + MLP towers) trained on synthetic implicit-feedback interactions."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class NeuMF(nn.Module):
    def __init__(self, n_users, n_items, dim, hidden):
        super().__init__()
        self.gmf_user = nn.Embedding(n_users, dim)
        self.gmf_item = nn.Embedding(n_items, dim)
        self.mlp_user = nn.Embedding(n_users, dim)
        self.mlp_item = nn.Embedding(n_items, dim)
        self.tower = nn.Sequential(nn.Linear(2 * dim, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.predict = nn.Linear(2 * dim, 1)
        for emb in (self.gmf_user, self.gmf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(emb.weight, std=0.1)

    def forward(self, users, items):
        gmf = self.gmf_user(users) * self.gmf_item(items)
        mlp = self.tower(torch.cat([self.mlp_user(users), self.mlp_item(items)], dim=-1))
        return self.predict(torch.cat([gmf, mlp], dim=-1)).squeeze(-1)


EMBEDDING_PREFIXES = {"neumf": ("gmf_", "mlp_"), "gmf": ("gmf_",)}


def build_param_groups(model, arch, weight_decay):
    prefixes = EMBEDDING_PREFIXES[arch]
    embeddings = [p for n, p in model.named_parameters() if n.startswith(prefixes)]
    dense = list(model.tower.parameters()) + list(model.predict.parameters())
    return [
        {"params": embeddings, "weight_decay": 0.0},
        {"params": dense, "weight_decay": weight_decay},
    ]


def synthetic_interactions(n, n_users, n_items, seed):
    g = torch.Generator().manual_seed(seed)
    user_f = torch.randn(n_users, 4, generator=g)
    item_f = torch.randn(n_items, 4, generator=g)
    users = torch.randint(0, n_users, (n,), generator=g)
    items = torch.randint(0, n_items, (n,), generator=g)
    labels = ((user_f[users] * item_f[items]).sum(-1) > 0).float()
    return users, items, labels


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--bug", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    n_users, n_items = 40, 60
    model = NeuMF(n_users, n_items, args.dim, hidden=32)
    # the "gmf" arch key is meant for GMF-only pretraining; NeuMF must use "neumf"
    arch = "gmf" if args.bug == "optimizer-wrong-params" else "neumf"
    optimizer = torch.optim.AdamW(build_param_groups(model, arch, 1e-4), lr=args.lr)

    users, items, labels = synthetic_interactions(args.steps * args.batch_size, n_users, n_items, args.seed)
    for step in range(args.steps):
        sl = slice(step * args.batch_size, (step + 1) * args.batch_size)
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(users[sl], items[sl]), labels[sl])
        loss.backward()
        optimizer.step()
        print(f"step {step} bce {loss.item():.4f}")
    return model


if __name__ == "__main__":
    main()
