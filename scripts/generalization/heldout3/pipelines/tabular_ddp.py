"""Two-rank DDP training of a tabular MLP with categorical embeddings (binary target).

Each rank draws its own shard of synthetic rows. --bug ddp-dtype-roundtrip.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

CARDINALITIES = (7, 5, 11)
N_NUMERIC = 6


class TabularNet(nn.Module):
    def __init__(self, emb_dim: int = 4, hidden: int = 32):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(c, emb_dim) for c in CARDINALITIES)
        self.num_norm = nn.BatchNorm1d(N_NUMERIC)
        d_in = emb_dim * len(CARDINALITIES) + N_NUMERIC
        self.mlp = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.out = nn.Linear(hidden, 1)

    def forward(self, cats, nums):
        embs = [emb(cats[:, i]) for i, emb in enumerate(self.embeddings)]
        h = torch.cat([*embs, self.num_norm(nums)], dim=1)
        return self.out(self.mlp(h)).squeeze(1)


def make_rows(gen, n):
    cats = torch.stack([torch.randint(0, c, (n,), generator=gen) for c in CARDINALITIES], 1)
    nums = torch.randn(n, N_NUMERIC, generator=gen)
    logit = nums[:, 0] - 0.5 * nums[:, 1] + (cats[:, 0] % 2).float() - 0.3 * (cats[:, 2] > 5)
    return cats, nums, (logit > 0).float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--bug", default="none", choices=["none", "ddp-dtype-roundtrip"])
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)  # identical init on all ranks
    gen = torch.Generator().manual_seed(args.seed * 100 + rank)  # per-rank data shard

    model = TabularNet()
    ddp_model = DDP(model)
    if args.bug == "ddp-dtype-roundtrip":
        # "sanity check" that the model survives a half-precision export, then back to fp32
        ddp_model.to(torch.bfloat16)
        ddp_model.to(torch.float32)
    opt = torch.optim.Adam(ddp_model.parameters(), lr=args.lr)

    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        cats, nums, y = make_rows(gen, args.batch_size)
        loss = F.binary_cross_entropy_with_logits(ddp_model(cats, nums), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    flat = torch.cat([p.detach().flatten() for p in ddp_model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    if rank == 0:
        drift = (gathered[0] - gathered[1]).abs().max().item()
        print(f"final loss {loss.item():.5f} max replica drift {drift:.3e}")
    del ddp_model
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
