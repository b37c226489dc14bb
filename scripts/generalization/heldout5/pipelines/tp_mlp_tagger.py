"""Simulated 2-way tensor-parallel (Megatron-style) feed-forward sequence classifier trained on synthetic token data.

fc1 is column-parallel and fc2 row-parallel (each rank holds a slice); the embedding,
LayerNorm, fc2 bias and head are replicated and kept in sync by averaging their grads.
"""
import argparse
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class _CopyToParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class _ReduceFromParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class TPFeedForwardClassifier(nn.Module):
    def __init__(self, vocab, dim, hidden, n_classes, rank, world):
        super().__init__()
        shard = hidden // world
        full_fc1 = nn.Linear(dim, hidden)
        full_fc2 = nn.Linear(hidden, dim)
        rows = slice(rank * shard, (rank + 1) * shard)
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.fc1_weight = nn.Parameter(full_fc1.weight.detach()[rows].clone())
        self.fc1_bias = nn.Parameter(full_fc1.bias.detach()[rows].clone())
        self.fc2_weight = nn.Parameter(full_fc2.weight.detach()[:, rows].clone())
        self.fc2_bias = nn.Parameter(full_fc2.bias.detach().clone())
        self.head = nn.Linear(dim, n_classes)

    def sharded_parameters(self):
        return [self.fc1_weight, self.fc1_bias, self.fc2_weight]

    def replicated_parameters(self):
        sharded = {id(p) for p in self.sharded_parameters()}
        return [p for p in self.parameters() if id(p) not in sharded]

    def forward(self, tokens):
        h = self.embed(tokens)
        x = _CopyToParallel.apply(self.norm(h))
        x = F.gelu(F.linear(x, self.fc1_weight, self.fc1_bias))
        x = _ReduceFromParallel.apply(F.linear(x, self.fc2_weight)) + self.fc2_bias
        h = h + x
        return self.head(h.mean(dim=1))


def clip_tp_grads(model, max_norm, rank, bug):
    sharded_sq = sum(p.grad.pow(2).sum() for p in model.sharded_parameters())
    dist.all_reduce(sharded_sq)
    replicated_sq = sum(p.grad.pow(2).sum() for p in model.replicated_parameters())
    total = math.sqrt(sharded_sq.item() + replicated_sq.item())
    coef = min(1.0, max_norm / (total + 1e-6))
    for p in model.sharded_parameters():
        p.grad.mul_(coef)
    if bug and rank != 0:
        return total
    for p in model.replicated_parameters():
        p.grad.mul_(coef)
    return total


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-norm", type=float, default=0.25)
    p.add_argument("--bug", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    vocab, seq_len, n_classes = 50, 10, 4
    model = TPFeedForwardClassifier(vocab, dim=16, hidden=32, n_classes=n_classes, rank=rank, world=world)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    g = torch.Generator().manual_seed(1000 + args.seed)  # same data on every TP rank
    tokens = torch.randint(0, vocab, (args.steps * args.batch_size, seq_len), generator=g)
    labels = tokens[:, :3].sum(dim=1) % n_classes
    for step in range(args.steps):
        sl = slice(step * args.batch_size, (step + 1) * args.batch_size)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(tokens[sl]), labels[sl])
        loss.backward()
        for param in model.replicated_parameters():
            dist.all_reduce(param.grad)
            param.grad.div_(world)
        total = clip_tp_grads(model, args.max_norm, rank, args.bug == "tp-clip-one-rank")
        optimizer.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f} grad_norm {total:.3f}")
    dist.destroy_process_group()
    return model


if __name__ == "__main__":
    main()
