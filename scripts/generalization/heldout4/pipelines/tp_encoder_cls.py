"""Transformer-encoder sequence classifier with hand-rolled 2-way tensor parallelism.

Megatron-style sharding simulated with torch.distributed (gloo, torchrun
--nproc_per_node=2): the QKV projection and the first MLP linear are
column-parallel (each rank owns half the heads / half the FFN units), the
attention output projection and second MLP linear are row-parallel (partial
outputs are all-reduced). Embeddings, LayerNorms, row-parallel biases and the
classification head are replicated; their gradients are averaged across ranks
after backward so the replicas stay identical. Every rank sees the same batch.
Gradients are clipped by the global norm (shards + replicated params).
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


class ColumnParallelLinear(nn.Module):
    def __init__(self, full: nn.Linear, rank, world, groups=1):
        super().__init__()
        out = full.out_features
        # split every group (e.g. q, k, v) separately so each rank gets whole heads
        w = full.weight.detach().view(groups, out // groups, -1)
        b = full.bias.detach().view(groups, out // groups)
        shard = out // groups // world
        self.weight = nn.Parameter(w[:, rank * shard:(rank + 1) * shard].reshape(-1, full.in_features).clone())
        self.bias = nn.Parameter(b[:, rank * shard:(rank + 1) * shard].reshape(-1).clone())

    def forward(self, x):
        return F.linear(_CopyToParallel.apply(x), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    def __init__(self, full: nn.Linear, rank, world):
        super().__init__()
        shard = full.in_features // world
        self.weight = nn.Parameter(full.weight.detach()[:, rank * shard:(rank + 1) * shard].clone())
        self.bias = nn.Parameter(full.bias.detach().clone())  # replicated, added after the reduce

    def forward(self, x_local):
        return _ReduceFromParallel.apply(F.linear(x_local, self.weight)) + self.bias


class ParallelBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, rank, world):
        super().__init__()
        self.local_heads = n_heads // world
        self.head_dim = d_model // n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = ColumnParallelLinear(nn.Linear(d_model, 3 * d_model), rank, world, groups=3)
        self.proj = RowParallelLinear(nn.Linear(d_model, d_model), rank, world)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = ColumnParallelLinear(nn.Linear(d_model, d_ff), rank, world)
        self.fc2 = RowParallelLinear(nn.Linear(d_ff, d_model), rank, world)

    def forward(self, x, pad_mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.local_heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(pad_mask[:, None, None, :], float("-inf"))
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.proj(ctx)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TPEncoderClassifier(nn.Module):
    def __init__(self, vocab, max_len, d_model, n_heads, d_ff, n_layers, n_classes, rank, world):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model, padding_idx=0)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList([ParallelBlock(d_model, n_heads, d_ff, rank, world) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, tokens):
        pad_mask = tokens == 0
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(tokens.shape[1]))
        for layer in self.layers:
            x = layer(x, pad_mask)
        x = self.ln_f(x)
        keep = (~pad_mask).unsqueeze(-1).float()
        pooled = (x * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.head(pooled)


def split_params(model):
    sharded, replicated = [], []
    for name, p in model.named_parameters():
        is_shard = (".qkv." in name or ".fc1." in name or
                    ((".proj." in name or ".fc2." in name) and name.endswith("weight")))
        (sharded if is_shard else replicated).append(p)
    return sharded, replicated


def make_batch(gen, batch_size, seq_len, vocab):
    lengths = torch.randint(seq_len // 2, seq_len + 1, (batch_size,), generator=gen)
    tokens = torch.randint(1, vocab, (batch_size, seq_len), generator=gen)
    tokens[torch.arange(seq_len)[None, :] >= lengths[:, None]] = 0
    # label: does the sequence contain more "high" tokens than "low" ones
    high = ((tokens >= vocab // 2) & (tokens > 0)).sum(1)
    low = ((tokens < vocab // 2) & (tokens > 0)).sum(1)
    return tokens, (high > low).long()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--max-grad-norm", type=float, default=0.25)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    vocab, seq_len = 20, 12

    torch.manual_seed(args.seed)  # same full weights on every rank before slicing
    model = TPEncoderClassifier(vocab, seq_len, args.d_model, 4, 2 * args.d_model, args.layers, 2, rank, world)
    sharded, replicated = split_params(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(args.seed + 500)  # same data stream on every rank

    model.train()
    for step in range(args.steps):
        tokens, labels = make_batch(gen, args.batch_size, seq_len, vocab)
        loss = F.cross_entropy(model(tokens), labels)
        optimizer.zero_grad()
        loss.backward()

        for p in replicated:
            dist.all_reduce(p.grad)
            p.grad.div_(world)

        if args.bug == "tp-clip-one-rank":
            if rank == 0:
                gnorm = torch.nn.utils.clip_grad_norm_(replicated, args.max_grad_norm)
                print(f"step {step} loss {loss.item():.4f} grad_norm {gnorm.item():.4f}")
        else:
            shard_sq = torch.stack([p.grad.pow(2).sum() for p in sharded]).sum()
            dist.all_reduce(shard_sq)
            repl_sq = torch.stack([p.grad.pow(2).sum() for p in replicated]).sum()
            gnorm = (shard_sq + repl_sq).sqrt()
            scale = (args.max_grad_norm / (gnorm + 1e-6)).clamp(max=1.0)
            for p in model.parameters():
                p.grad.mul_(scale)
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f} grad_norm {gnorm.item():.4f}")
        optimizer.step()

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
