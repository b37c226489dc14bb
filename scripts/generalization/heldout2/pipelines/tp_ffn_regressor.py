"""Simulated 2-rank tensor parallelism: column/row-parallel FFN regressor; LayerNorm, fc2 bias and
head are replicated with hand-averaged grads; SGD with global-norm clipping. Bug
`tp-clip-one-rank`: clip_grad_norm_ runs inside the rank-0 logging block, so only rank 0 clips.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class _CopyToParallel(torch.autograd.Function):
    """Identity forward; all-reduce of the input grad in backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad


class _ReduceFromParallel(torch.autograd.Function):
    """All-reduce (sum) of partial outputs in forward; identity in backward."""

    @staticmethod
    def forward(ctx, x):
        x = x.contiguous().clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class ColumnParallelLinear(nn.Module):
    def __init__(self, full_weight: torch.Tensor, full_bias: torch.Tensor, rank: int, world: int):
        super().__init__()
        rows = full_weight.shape[0] // world
        sl = slice(rank * rows, (rank + 1) * rows)
        self.weight = nn.Parameter(full_weight[sl].clone())
        self.bias = nn.Parameter(full_bias[sl].clone())
        self.weight.tensor_parallel = True
        self.bias.tensor_parallel = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(_CopyToParallel.apply(x), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    def __init__(self, full_weight: torch.Tensor, full_bias: torch.Tensor, rank: int, world: int):
        super().__init__()
        cols = full_weight.shape[1] // world
        self.weight = nn.Parameter(full_weight[:, rank * cols:(rank + 1) * cols].clone())
        self.bias = nn.Parameter(full_bias.clone())  # replicated
        self.weight.tensor_parallel = True

    def forward(self, x_shard: torch.Tensor) -> torch.Tensor:
        partial = F.linear(x_shard, self.weight)
        return _ReduceFromParallel.apply(partial) + self.bias


class TPRegressor(nn.Module):
    def __init__(self, d_model: int, d_ff: int, rank: int, world: int) -> None:
        super().__init__()
        full1, full2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)  # same on all ranks
        self.norm = nn.LayerNorm(d_model)
        self.fc1 = ColumnParallelLinear(full1.weight.data, full1.bias.data, rank, world)
        self.fc2 = RowParallelLinear(full2.weight.data, full2.bias.data, rank, world)
        self.head = nn.Linear(d_model, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc2(F.gelu(self.fc1(self.norm(x))))
        return self.head(x + h).squeeze(-1)


def is_sharded(p: torch.nn.Parameter) -> bool:
    return getattr(p, "tensor_parallel", False)


def average_replicated_grads(model: nn.Module, world: int) -> None:
    for p in model.parameters():
        if p.grad is not None and not is_sharded(p):
            dist.all_reduce(p.grad)
            p.grad.div_(world)


def clip_grad_norm_tp(model: nn.Module, max_norm: float) -> torch.Tensor:
    sharded_sq = torch.zeros(())
    replicated_sq = torch.zeros(())
    for p in model.parameters():
        if p.grad is None:
            continue
        if is_sharded(p):
            sharded_sq += p.grad.pow(2).sum()
        else:
            replicated_sq += p.grad.pow(2).sum()
    dist.all_reduce(sharded_sq)
    total = (sharded_sq + replicated_sq).sqrt()
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in model.parameters():
        if p.grad is not None:
            p.grad.mul_(coef)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-norm", type=float, default=0.5)
    parser.add_argument("--bug", default="none", choices=["none", "tp-clip-one-rank"])
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)
    model = TPRegressor(d_model=16, d_ff=64, rank=rank, world=world)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    # tensor parallel: every rank sees the same batch
    gen = torch.Generator().manual_seed(args.seed + 7)
    w_true = torch.randn(16, generator=gen)
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 16, generator=gen)
        y = torch.sin(x @ w_true) + 0.1 * torch.randn(args.batch_size, generator=gen)
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        average_replicated_grads(model, world)
        if args.bug == "tp-clip-one-rank":
            if rank == 0:
                gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
                print(f"step {step} loss {loss.item():.4f} grad-norm {gnorm.item():.3f}")
        else:
            gnorm = clip_grad_norm_tp(model, args.max_norm)
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f} grad-norm {gnorm.item():.3f}")
        optimizer.step()

    replicated = torch.cat([p.detach().flatten() for p in model.parameters() if not is_sharded(p)])
    print(f"rank {rank} replicated checksum {replicated.double().sum().item():.8f}")
    if rank == 0:
        print(f"final loss {loss.item():.6f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
