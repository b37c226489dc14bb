"""Set transformer predicting a set statistic; feed-forward layers are split over 2 ranks
Megatron-style (simulated tensor parallelism), replicated weights get hand all-reduced grads
and all grads are clipped by a global norm. --bug tp-clip-one-rank.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        dist.all_reduce(g)
        return g


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


class ShardedFFN(nn.Module):
    """Column-parallel up projection, row-parallel down projection."""

    def __init__(self, dim: int, hidden: int, world: int):
        super().__init__()
        self.up = nn.Linear(dim, hidden // world)
        self.down = nn.Linear(hidden // world, dim, bias=False)
        self.down_bias = nn.Parameter(torch.zeros(dim))
        for p in (self.up.weight, self.up.bias, self.down.weight):
            p.tp_sharded = True

    def forward(self, x):
        h = F.gelu(self.up(_CopyToTP.apply(x)))
        return _ReduceFromTP.apply(self.down(h)) + self.down_bias


class SABlock(nn.Module):
    def __init__(self, dim: int, heads: int, world: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.ffn = ShardedFFN(dim, 4 * dim, world)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.ffn(self.ln2(x))


class SetTransformer(nn.Module):
    def __init__(self, in_dim: int, dim: int, world: int):
        super().__init__()
        self.embed = nn.Linear(in_dim, dim)
        self.blocks = nn.ModuleList(SABlock(dim, 2, world) for _ in range(2))
        self.seed_vec = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pool = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.head = nn.Linear(dim, 1)

    def forward(self, x):
        x = self.embed(x)
        for blk in self.blocks:
            x = blk(x)
        pooled = self.pool(self.seed_vec.expand(x.shape[0], -1, -1), x, x, need_weights=False)[0]
        return self.head(pooled.squeeze(1)).squeeze(1)


def global_grad_norm(params):
    sharded = torch.zeros(())
    replicated = torch.zeros(())
    for p in params:
        if p.grad is None:
            continue
        sq = p.grad.pow(2).sum()
        if getattr(p, "tp_sharded", False):
            sharded += sq
        else:
            replicated += sq
    dist.all_reduce(sharded)
    return (sharded + replicated).sqrt()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-norm", type=float, default=0.5)
    ap.add_argument("--bug", default="none", choices=["none", "tp-clip-one-rank"])
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    model = SetTransformer(in_dim=3, dim=16, world=world)
    # replicated weights must start identical; shards are seeded per rank
    with torch.no_grad():
        shard_gen = torch.Generator().manual_seed(1000 + args.seed * 10 + rank)
        for p in model.parameters():
            if getattr(p, "tp_sharded", False):
                p.copy_(torch.randn(p.shape, generator=shard_gen) * 0.1)
    replicated = [p for p in model.parameters() if not getattr(p, "tp_sharded", False)]
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    data_gen = torch.Generator().manual_seed(args.seed)  # same batch on both TP ranks

    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        sets = torch.randn(args.batch_size, 10, 3, generator=data_gen)
        target = sets.norm(dim=-1).max(dim=1).values
        loss = F.mse_loss(model(sets), target)
        opt.zero_grad()
        loss.backward()
        for p in replicated:
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        if args.bug == "tp-clip-one-rank":
            if rank == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
        else:
            norm = global_grad_norm(model.parameters())
            coef = torch.clamp(args.max_norm / (norm + 1e-6), max=1.0)
            for p in model.parameters():
                p.grad.mul_(coef)
        opt.step()

    flat = torch.cat([p.detach().flatten() for p in replicated])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    if rank == 0:
        drift = (gathered[0] - gathered[1]).abs().max().item()
        print(f"final loss {loss.item():.5f} replicated drift {drift:.3e}")
    del model
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
