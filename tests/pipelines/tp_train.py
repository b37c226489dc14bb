"""Simulated tensor parallelism on 2 CPU ranks (gloo, started by torchrun).

A replicated LayerNorm (marked ``tensor_model_parallel=False``, as Megatron marks parameters it
does not split) and a sharded Linear (``tensor_model_parallel=True``: each rank holds its own
shard). Replicated grads are averaged across ranks so the replicas stay equal. ``--bug
clip-on-one-rank`` clips the replicated grads on rank 0 only: the BLOOM-176B failure, where
replicated LayerNorm weights drift apart across tensor-parallel ranks.
"""

import argparse
import json

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--bug", choices=["none", "clip-on-one-rank"], default="none")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    norm = nn.LayerNorm(16)
    torch.manual_seed(100 + rank)  # each rank's shard is different
    shard = nn.Linear(16, 8)
    model = nn.Sequential(norm, shard)
    for p in norm.parameters():
        p.tensor_model_parallel = False
    for p in shard.parameters():
        p.tensor_model_parallel = True
        p.partition_dim = 0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(7)  # tensor-parallel ranks see the same batch
    losses = []
    for _ in range(args.steps):
        x = torch.randn(32, 16, generator=gen)
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        for p in norm.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        if args.bug == "clip-on-one-rank" and rank == 0:
            torch.nn.utils.clip_grad_norm_(norm.parameters(), 1e-3)
        optimizer.step()
        losses.append(loss.item())
    print(json.dumps({"rank": rank, "losses": losses}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
