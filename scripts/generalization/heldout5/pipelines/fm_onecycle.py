"""Factorization machine click-through model on synthetic sparse categorical features, trained with OneCycleLR and hand-sliced batches."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class FactorizationMachine(nn.Module):
    def __init__(self, field_sizes, k):
        super().__init__()
        self.offsets = torch.tensor([0] + list(torch.tensor(field_sizes).cumsum(0)[:-1]))
        n = sum(field_sizes)
        self.linear = nn.Embedding(n, 1)
        self.factors = nn.Embedding(n, k)
        self.bias = nn.Parameter(torch.zeros(1))
        nn.init.normal_(self.factors.weight, std=0.05)

    def forward(self, fields):
        idx = fields + self.offsets
        v = self.factors(idx)
        pairwise = 0.5 * (v.sum(1).pow(2) - v.pow(2).sum(1)).sum(-1)
        return self.bias + self.linear(idx).sum(dim=(1, 2)) + pairwise


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--factors", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    field_sizes = [10, 7, 12, 5]
    model = FactorizationMachine(field_sizes, args.factors)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.steps, pct_start=0.3)
    g = torch.Generator().manual_seed(args.seed)
    n = args.steps * args.batch_size
    fields = torch.stack([torch.randint(0, s, (n,), generator=g) for s in field_sizes], dim=1)
    clicks = ((fields[:, 0] % 3 == fields[:, 2] % 3) | (fields[:, 1] > 4)).float()
    perm = torch.randperm(n, generator=g)
    for step in range(args.steps):
        idx = perm[step * args.batch_size:(step + 1) * args.batch_size]
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(fields[idx]), clicks[idx])
        loss.backward()
        optimizer.step()
        scheduler.step()
        print(f"step {step} logloss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.4f}")


if __name__ == "__main__":
    main()
