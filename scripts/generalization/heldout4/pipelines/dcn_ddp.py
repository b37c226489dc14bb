"""Deep & Cross Network (DCN-v2) click-through-rate model trained with 2-rank DDP.

Synthetic CTR data: a few categorical fields (embedded) plus dense features,
with a label generated from hidden pairwise feature crosses. The model stacks
explicit cross layers x_{l+1} = x0 * (W x_l + b) + x_l in parallel with a deep
tower. Launch with torchrun --nproc_per_node=2 (gloo backend); each rank reads
its own shard of the synthetic stream.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

FIELD_CARDINALITIES = (10, 7, 12, 5)
NUM_DENSE = 6


def make_batch(gen, batch_size, true_w):
    cats = torch.stack([torch.randint(0, c, (batch_size,), generator=gen) for c in FIELD_CARDINALITIES], 1)
    dense = torch.randn(batch_size, NUM_DENSE, generator=gen)
    logit = (dense @ true_w[:NUM_DENSE]) + dense[:, 0] * dense[:, 1] - 0.5 * (cats[:, 0] % 3 == 0).float()
    labels = (torch.sigmoid(logit) > torch.rand(batch_size, generator=gen)).float()
    return cats, dense, labels


class CrossLayer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x0, x):
        return x0 * self.proj(x) + x


class DCN(nn.Module):
    def __init__(self, emb_dim, num_cross, deep_hidden):
        super().__init__()
        self.embeddings = nn.ModuleList([nn.Embedding(c, emb_dim) for c in FIELD_CARDINALITIES])
        in_dim = emb_dim * len(FIELD_CARDINALITIES) + NUM_DENSE
        self.dense_norm = nn.LayerNorm(NUM_DENSE)
        self.cross = nn.ModuleList([CrossLayer(in_dim) for _ in range(num_cross)])
        self.deep = nn.Sequential(nn.Linear(in_dim, deep_hidden), nn.ReLU(),
                                  nn.Linear(deep_hidden, deep_hidden), nn.ReLU())
        self.out = nn.Linear(in_dim + deep_hidden, 1)

    def forward(self, cats, dense):
        embs = [emb(cats[:, i]) for i, emb in enumerate(self.embeddings)]
        x0 = torch.cat(embs + [self.dense_norm(dense)], dim=1)
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        return self.out(torch.cat([x, self.deep(x0)], dim=1)).squeeze(-1)


def check_numerics(model, cats, dense, labels):
    """Compare the fp32 loss with a float64 reference before training starts."""
    with torch.no_grad():
        ref32 = F.binary_cross_entropy_with_logits(model(cats, dense), labels)
        model.double()
        ref64 = F.binary_cross_entropy_with_logits(model(cats, dense.double()), labels.double())
        model.float()
    return abs(ref32.item() - ref64.item())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--emb-dim", type=int, default=8)
    ap.add_argument("--cross-layers", type=int, default=2)
    ap.add_argument("--deep-hidden", type=int, default=32)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, _world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)  # identical init on all ranks
    true_w = torch.randn(NUM_DENSE, generator=torch.Generator().manual_seed(7))
    gen = torch.Generator().manual_seed(args.seed * 100 + rank)

    model = DCN(args.emb_dim, args.cross_layers, args.deep_hidden)
    ddp_model = DDP(model)
    if args.bug == "ddp-dtype-roundtrip":
        cats, dense, labels = make_batch(torch.Generator().manual_seed(99), 64, true_w)
        gap = check_numerics(ddp_model.module, cats, dense, labels)
        if rank == 0:
            print(f"fp32 vs fp64 loss gap {gap:.2e}")

    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=args.lr)
    ddp_model.train()
    for step in range(args.steps):
        cats, dense, labels = make_batch(gen, args.batch_size, true_w)
        logits = ddp_model(cats, dense)
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}")

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
