"""Two-rank DDP (gloo) training of a neural collaborative-filtering recommender on sharded data.
Bug `ddp-dtype-roundtrip`: after wrapping in DDP the module is cast to float64 and back, which
detaches the params from DDP's grad hooks; grads stop being all-reduced and replicas drift.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

N_USERS, N_ITEMS = 200, 300


class NCF(nn.Module):
    def __init__(self, n_users: int, n_items: int, dim: int = 16) -> None:
        super().__init__()
        self.user_emb = nn.Embedding(n_users, dim)
        self.item_emb = nn.Embedding(n_items, dim)
        self.mlp = nn.Sequential(
            nn.Linear(2 * dim, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU()
        )
        self.out = nn.Linear(16 + dim, 1)
        nn.init.normal_(self.user_emb.weight, std=0.1)
        nn.init.normal_(self.item_emb.weight, std=0.1)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        u, i = self.user_emb(users), self.item_emb(items)
        gmf = u * i
        deep = self.mlp(torch.cat([u, i], dim=-1))
        return self.out(torch.cat([gmf, deep], dim=-1)).squeeze(-1)


def make_interactions(n: int, gen: torch.Generator):
    user_f = torch.randn(N_USERS, 4, generator=gen)
    item_f = torch.randn(N_ITEMS, 4, generator=gen)
    users = torch.randint(0, N_USERS, (n,), generator=gen)
    items = torch.randint(0, N_ITEMS, (n,), generator=gen)
    logits = (user_f[users] * item_f[items]).sum(-1)
    labels = torch.bernoulli(torch.sigmoid(2 * logits), generator=gen)
    return users, items, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--bug", default="none", choices=["none", "ddp-dtype-roundtrip"])
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)  # identical initial replicas
    gen = torch.Generator().manual_seed(args.seed)
    users, items, labels = make_interactions(4096, gen)
    # shard the interactions across ranks, DistributedSampler style
    users, items, labels = users[rank::world], items[rank::world], labels[rank::world]

    model = NCF(N_USERS, N_ITEMS)
    ddp_model = DDP(model)
    if args.bug == "ddp-dtype-roundtrip":
        ddp_model.module.double()
        ddp_model.module.float()
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=args.lr)

    shard_gen = torch.Generator().manual_seed(args.seed * 100 + rank)
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        idx = torch.randint(0, users.shape[0], (args.batch_size,), generator=shard_gen)
        logits = ddp_model(users[idx], items[idx])
        loss = F.binary_cross_entropy_with_logits(logits, labels[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}")

    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"rank {rank} param checksum {checksum:.8f}")
    if rank == 0:
        print(f"final loss {loss.item():.6f}")
    del ddp_model  # release DDP's reducer before tearing down the process group
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
