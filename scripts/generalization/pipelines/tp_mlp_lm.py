"""Simulated 2-rank tensor parallelism (Megatron/BLOOM style, torchrun): a residual-MLP LM with column/row-sharded
MLPs and replicated embeddings/LayerNorms/head whose grads are all-reduced by hand, then a TP-aware grad clip.
Bug `tp-clip-one-rank`: gradient clipping is applied on rank 0 only, so replicated parameters drift apart."""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class _CopyToModelParallel(torch.autograd.Function):
    """Identity in forward, all-reduce (sum) of the gradient in backward."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad


class _ReduceFromModelParallel(torch.autograd.Function):
    """All-reduce (sum) in forward, identity in backward."""

    @staticmethod
    def forward(ctx, x):
        x = x.contiguous().clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def _mark(param, sharded, partition_dim=-1):
    param.tensor_model_parallel = sharded
    param.partition_dim = partition_dim
    return param


class ColumnParallelLinear(nn.Module):
    def __init__(self, d_in, d_out, rank, world, gen):
        super().__init__()
        full_w = torch.randn(d_out, d_in, generator=gen) * (d_in ** -0.5)
        shard = d_out // world
        self.weight = _mark(nn.Parameter(full_w[rank * shard:(rank + 1) * shard].clone()), True, 0)
        self.bias = _mark(nn.Parameter(torch.zeros(shard)), True, 0)

    def forward(self, x):
        return F.linear(_CopyToModelParallel.apply(x), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    def __init__(self, d_in, d_out, rank, world, gen):
        super().__init__()
        full_w = torch.randn(d_out, d_in, generator=gen) * (d_in ** -0.5)
        shard = d_in // world
        self.weight = _mark(nn.Parameter(full_w[:, rank * shard:(rank + 1) * shard].clone()), True, 1)
        self.bias = _mark(nn.Parameter(torch.zeros(d_out)), False)

    def forward(self, x):
        return _ReduceFromModelParallel.apply(F.linear(x, self.weight)) + self.bias


class ParallelMLP(nn.Module):
    def __init__(self, d_model, d_ff, rank, world, gen):
        super().__init__()
        self.fc_in = ColumnParallelLinear(d_model, d_ff, rank, world, gen)
        self.fc_out = RowParallelLinear(d_ff, d_model, rank, world, gen)

    def forward(self, x):
        return self.fc_out(F.gelu(self.fc_in(x)))


class Block(nn.Module):
    def __init__(self, d_model, d_ff, rank, world, gen):
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.mlp = ParallelMLP(d_model, d_ff, rank, world, gen)

    def forward(self, x):
        return x + self.mlp(self.ln(x))


class TPLanguageModel(nn.Module):
    def __init__(self, vocab, d_model, d_ff, n_layers, context, rank, world, gen):
        super().__init__()
        self.context = context
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList([Block(d_model, d_ff, rank, world, gen) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model * context, vocab)
        for p in self.parameters():
            if not hasattr(p, "tensor_model_parallel"):
                _mark(p, False)

    def forward(self, ctx_tokens):
        h = self.embed(ctx_tokens)
        for block in self.blocks:
            h = block(h)
        return self.lm_head(self.ln_f(h).flatten(1))


def allreduce_replicated_grads(model, world):
    for p in model.parameters():
        if not p.tensor_model_parallel and p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(world)


def clip_grad_norm_tp_(model, max_norm):
    sharded_sq = torch.zeros(())
    replicated_sq = torch.zeros(())
    for p in model.parameters():
        if p.grad is None:
            continue
        if p.tensor_model_parallel:
            sharded_sq += p.grad.pow(2).sum()
        else:
            replicated_sq += p.grad.pow(2).sum()
    dist.all_reduce(sharded_sq)
    total_norm = (sharded_sq + replicated_sq).sqrt()
    coef = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    for p in model.parameters():
        if p.grad is not None:
            p.grad.mul_(coef)
    return total_norm


def make_batch(gen, vocab, context, batch_size, shift):
    # next token = (last context token + shift) mod vocab, with some noise
    x = torch.randint(0, vocab, (batch_size, context), generator=gen)
    y = (x[:, -1] + shift) % vocab
    noise = torch.rand(batch_size, generator=gen) < 0.1
    y = torch.where(noise, torch.randint(0, vocab, (batch_size,), generator=gen), y)
    return x, y


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--bug", choices=["none", "tp-clip-one-rank"], default="none")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    vocab, context = 16, 4

    torch.manual_seed(args.seed)  # replicated params: same init on every rank
    shard_gen = torch.Generator().manual_seed(args.seed + 1)  # full sharded weights, sliced per rank
    model = TPLanguageModel(vocab, 32, 64, 2, context, rank, world, shard_gen)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    data_gen = torch.Generator().manual_seed(args.seed + 2)  # all TP ranks see the same batch
    model.train()
    for _step in range(args.steps):
        x, y = make_batch(data_gen, vocab, context, args.batch_size, shift=3)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        allreduce_replicated_grads(model, world)
        if args.bug == "tp-clip-one-rank":
            if rank == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        else:
            clip_grad_norm_tp_(model, args.max_grad_norm)
        optimizer.step()

    if rank == 0:
        print(f"final loss {loss.item():.6f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
