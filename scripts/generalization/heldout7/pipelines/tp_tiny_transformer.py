"""Tiny decoder-only transformer with hand-written Megatron-style tensor parallelism over 2 ranks.

Attention heads and the MLP hidden dimension are sharded (column-parallel in, row-parallel out);
embeddings, LayerNorms and the LM head are replicated. Both ranks see the same token batch.
Global-norm gradient clipping over sharded + replicated parameters, Nesterov SGD, linear warmup.
Launch: torchrun --nproc_per_node=2 tp_tiny_transformer.py --steps 10
"""
from __future__ import annotations

import argparse
import math

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


class ParallelAttention(nn.Module):
    def __init__(self, d_model, n_heads, tp):
        super().__init__()
        self.local_heads = n_heads // tp
        self.head_dim = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * self.local_heads * self.head_dim)  # column-parallel shard
        self.proj = nn.Linear(self.local_heads * self.head_dim, d_model, bias=False)  # row-parallel shard

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(_CopyToTP.apply(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.local_heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return _ReduceFromTP.apply(self.proj(att.transpose(1, 2).reshape(b, t, -1)))


class ParallelMLP(nn.Module):
    def __init__(self, d_model, d_ff, tp):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff // tp)
        self.down = nn.Linear(d_ff // tp, d_model, bias=False)

    def forward(self, x):
        return _ReduceFromTP.apply(self.down(F.gelu(self.up(_CopyToTP.apply(x)))))


class Block(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, tp):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = ParallelAttention(d_model, n_heads, tp)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = ParallelMLP(d_model, d_ff, tp)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab, d_model, n_heads, d_ff, n_layers, ctx, tp):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(ctx, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_ff, tp) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        h = self.tok_emb(idx) + self.pos_emb(pos)
        for blk in self.blocks:
            h = blk(h)
        return self.lm_head(self.ln_f(h))


SHARDED_KEYS = ("attn.qkv", "attn.proj", "mlp.up", "mlp.down")


def is_sharded(name):
    return any(k in name for k in SHARDED_KEYS)


def global_grad_norm(model):
    shard_sq = torch.zeros(())
    repl_sq = torch.zeros(())
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        if is_sharded(name):
            shard_sq += p.grad.pow(2).sum()
        else:
            repl_sq += p.grad.pow(2).sum()
    dist.all_reduce(shard_sq)
    return (shard_sq + repl_sq).sqrt()


def scale_grads_(model, total_norm, max_norm):
    coef = max_norm / (total_norm + 1e-6)
    if coef < 1:
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(coef)


class RankZeroLogger:
    """Metrics sink that only exists on rank 0; optionally owns the clipping so the logged norm is the clipped one."""

    def __init__(self, max_norm, owns_clipping):
        self.max_norm = max_norm
        self.owns_clipping = owns_clipping

    def before_step(self, model, step, loss, total_norm):
        if self.owns_clipping:
            scale_grads_(model, total_norm, self.max_norm)
        print(f"step {step} loss {loss:.4f} grad_norm {total_norm:.3f}")


def markov_tokens(gen, batch, ctx, vocab):
    trans = torch.softmax(3 * torch.randn(vocab, vocab, generator=gen), dim=-1)
    seq = torch.zeros(batch, ctx + 1, dtype=torch.long)
    seq[:, 0] = torch.randint(0, vocab, (batch,), generator=gen)
    for t in range(ctx):
        seq[:, t + 1] = torch.multinomial(trans[seq[:, t]], 1, generator=gen).squeeze(1)
    return seq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bug", choices=["tp-clip-one-rank"], default=None)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--max-norm", type=float, default=0.25)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, tp = dist.get_rank(), dist.get_world_size()
    vocab, ctx = 24, 16

    # replicated parameters must start identical -> same seed everywhere, then reseed the shards per rank
    torch.manual_seed(args.seed)
    model = TinyLM(vocab, args.d_model, n_heads=4, d_ff=4 * args.d_model, n_layers=2, ctx=ctx, tp=tp)
    torch.manual_seed(args.seed + 100 * (rank + 1))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if is_sharded(name) and p.dim() == 2:
                nn.init.normal_(p, std=0.02 if "proj" in name or "down" in name else 1 / math.sqrt(p.shape[1]))

    clip_in_logger = args.bug == "tp-clip-one-rank"
    logger = RankZeroLogger(args.max_norm, owns_clipping=clip_in_logger) if rank == 0 else None

    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / args.warmup))
    data_gen = torch.Generator().manual_seed(args.seed)  # identical batches on both ranks
    losses = []
    for step in range(args.steps):
        seq = markov_tokens(data_gen, args.batch_size, ctx, vocab)
        logits = model(seq[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), seq[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        total_norm = global_grad_norm(model)
        if not clip_in_logger:
            scale_grads_(model, total_norm, args.max_norm)
        if logger is not None:
            logger.before_step(model, step, loss.item(), total_norm.item())
        opt.step()
        sched.step()
        losses.append(loss.item())

    repl = torch.cat([p.detach().flatten() for n, p in model.named_parameters() if not is_sharded(n)])
    other = [torch.zeros_like(repl) for _ in range(tp)]
    dist.all_gather(other, repl)
    if rank == 0:
        print(f"replicated-param max diff across ranks: {(other[0] - other[1]).abs().max().item():.3e}")
    if args.save:
        torch.save({"state": model.state_dict(), "losses": losses}, f"{args.save}.rank{rank}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
