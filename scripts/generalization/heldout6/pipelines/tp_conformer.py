"""Conformer-style block (sharded FFN, replicated conv module/norms/head) for sequence classification,
simulated 2-way tensor parallelism over gloo."""
import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class _CopyToShards(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class _ReduceFromShards(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class ShardedFFN(nn.Module):
    """Column-parallel up projection followed by a row-parallel down projection."""

    def __init__(self, dim, hidden, rank, world, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed + 17)
        w1 = torch.randn(hidden, dim, generator=g) / dim ** 0.5
        w2 = torch.randn(dim, hidden, generator=g) / hidden ** 0.5
        part = hidden // world
        sl = slice(rank * part, (rank + 1) * part)
        self.w1 = nn.Parameter(w1[sl].clone())
        self.b1 = nn.Parameter(torch.zeros(part))
        self.w2 = nn.Parameter(w2[:, sl].clone())
        self.b2 = nn.Parameter(torch.zeros(dim))  # replicated

    def forward(self, x):
        x = _CopyToShards.apply(x)
        h = F.silu(F.linear(x, self.w1, self.b1))
        return _ReduceFromShards.apply(F.linear(h, self.w2)) + self.b2


class ConvModule(nn.Module):
    def __init__(self, dim, kernel):
        super().__init__()
        self.pointwise = nn.Conv1d(dim, 2 * dim, 1)
        self.depthwise = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        self.norm = nn.BatchNorm1d(dim)

    def forward(self, x):
        h = F.glu(self.pointwise(x.transpose(1, 2)), dim=1)
        return F.silu(self.norm(self.depthwise(h))).transpose(1, 2)


class ConformerClassifier(nn.Module):
    def __init__(self, vocab, dim, hidden, n_classes, rank, world, seed):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.ffn_norm = nn.LayerNorm(dim)
        self.ffn = ShardedFFN(dim, hidden, rank, world, seed)
        self.conv_norm = nn.LayerNorm(dim)
        self.conv = ConvModule(dim, 3)
        self.final_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, tokens):
        x = self.embed(tokens)
        x = x + 0.5 * self.ffn(self.ffn_norm(x))
        x = x + self.conv(self.conv_norm(x))
        return self.head(self.final_norm(x).mean(1))


def replicated_params(model):
    sharded = {"ffn.w1", "ffn.b1", "ffn.w2"}
    return [p for n, p in model.named_parameters() if n not in sharded]


def sync_replicated_grads(params, world):
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(world)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--max-norm", type=float, default=0.5)
    p.add_argument("--bug", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)  # same data on every TP rank

    model = ConformerClassifier(20, args.dim, 4 * args.dim, 3, rank, world, args.seed)
    replicated = replicated_params(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    log_only_clip = args.bug == "tp-clip-one-rank"

    for step in range(args.steps):
        tokens = torch.randint(0, 20, (args.batch_size, 12), generator=gen)
        labels = (tokens[:, :4].sum(1) % 3)
        loss = F.cross_entropy(model(tokens), labels)
        opt.zero_grad()
        loss.backward()
        sync_replicated_grads(replicated, world)
        if not log_only_clip:
            gnorm = torch.nn.utils.clip_grad_norm_(replicated, args.max_norm)
        if rank == 0:
            if log_only_clip:
                gnorm = torch.nn.utils.clip_grad_norm_(replicated, args.max_norm)
            print(f"step {step} loss {loss.item():.4f} replicated-gnorm {gnorm.item():.3f}")
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
