"""Matrix factorisation recommender with sparse embedding gradients (nn.Embedding(sparse=True)) and plain SGD."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class MF(nn.Module):
    def __init__(self, n_users, n_items, dim):
        super().__init__()
        self.user = nn.Embedding(n_users, dim, sparse=True)
        self.item = nn.Embedding(n_items, dim, sparse=True)
        self.user_bias = nn.Embedding(n_users, 1, sparse=True)
        self.item_bias = nn.Embedding(n_items, 1, sparse=True)
        for emb in (self.user, self.item):
            nn.init.normal_(emb.weight, std=0.1)
        nn.init.zeros_(self.user_bias.weight)
        nn.init.zeros_(self.item_bias.weight)

    def forward(self, u, i):
        dot = (self.user(u) * self.item(i)).sum(-1)
        return dot + self.user_bias(u).squeeze(-1) + self.item_bias(i).squeeze(-1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--dim", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    n_users, n_items = 40, 30
    true_u = torch.randn(n_users, 3, generator=gen)
    true_i = torch.randn(n_items, 3, generator=gen)
    model = MF(n_users, n_items, args.dim)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        u = torch.randint(0, n_users, (args.batch_size,), generator=gen)
        i = torch.randint(0, n_items, (args.batch_size,), generator=gen)
        rating = (true_u[u] * true_i[i]).sum(-1)
        loss = F.mse_loss(model(u, i), rating)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
