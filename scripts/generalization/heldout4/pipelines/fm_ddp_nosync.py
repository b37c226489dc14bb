"""Factorization machine for rating prediction, 2-rank DDP with no_sync gradient accumulation.

Launch with torchrun --nproc_per_node=2 (gloo). A second-order
factorization machine (linear term + O(kn) pairwise interaction trick) is
trained on synthetic one-hot (user, item, genre) triples with a
DistributedSampler over a TensorDataset. Each optimizer step accumulates
--accum micro-batches; all but the last are run inside ddp.no_sync() so the
gradient all-reduce happens once per step.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

FIELDS = (30, 25, 5)  # users, items, genres


class FactorizationMachine(nn.Module):
    def __init__(self, n_features, k):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1))
        self.linear = nn.Embedding(n_features, 1)
        self.factors = nn.Embedding(n_features, k)
        nn.init.zeros_(self.linear.weight)
        nn.init.normal_(self.factors.weight, std=0.05)

    def forward(self, feat_ids):
        v = self.factors(feat_ids)                               # (B, F, k)
        pairwise = 0.5 * (v.sum(1).pow(2) - v.pow(2).sum(1)).sum(-1)
        return self.bias + self.linear(feat_ids).sum((1, 2)) + pairwise


def build_dataset(seed, n):
    g = torch.Generator().manual_seed(seed)
    offsets = torch.tensor([0, FIELDS[0], FIELDS[0] + FIELDS[1]])
    raw = torch.stack([torch.randint(0, c, (n,), generator=g) for c in FIELDS], 1)
    u_f = torch.randn(FIELDS[0], 3, generator=g)
    i_f = torch.randn(FIELDS[1], 3, generator=g)
    rating = 3.0 + (u_f[raw[:, 0]] * i_f[raw[:, 1]]).sum(-1) + 0.3 * (raw[:, 2] - 2).float()
    rating = rating + 0.1 * torch.randn(n, generator=g)
    return TensorDataset(raw + offsets, rating.clamp(1.0, 5.0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--factors", type=int, default=8)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)

    dataset = build_dataset(1234, 512)
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    model = FactorizationMachine(sum(FIELDS), args.factors)
    ddp = DDP(model)
    optimizer = torch.optim.Adagrad(ddp.parameters(), lr=args.lr)

    ddp.train()
    step, epoch = 0, 0
    micro = []
    while step < args.steps:
        sampler.set_epoch(epoch)
        for feats, rating in loader:
            micro.append((feats, rating))
            if len(micro) < args.accum:
                continue
            optimizer.zero_grad()
            for i, (f, r) in enumerate(micro):
                last = i == len(micro) - 1
                if last:
                    loss = nn.functional.mse_loss(ddp(f), r) / args.accum
                    loss.backward()
                else:
                    with ddp.no_sync():
                        loss = nn.functional.mse_loss(ddp(f), r) / args.accum
                        loss.backward()
            optimizer.step()
            micro = []
            if rank == 0:
                print(f"epoch {epoch} step {step} last-micro-loss {loss.item() * args.accum:.4f}")
            step += 1
            if step >= args.steps:
                break
        epoch += 1

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
