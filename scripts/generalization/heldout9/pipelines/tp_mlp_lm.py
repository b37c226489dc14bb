"""Hand-rolled Megatron-style tensor parallelism for a tiny token-shift MLP language model.

fc_in is column-parallel, fc_out is row-parallel; embeddings, LayerNorms, the
token-shift mix and the LM head are replicated on every rank.  Every rank sees
the same batch.  Launch with torchrun --nproc_per_node=2 (or as one process).
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------- comm
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


def _full_weight(out_f, in_f, seed):
    g = torch.Generator().manual_seed(seed)
    bound = 1.0 / in_f ** 0.5
    return (torch.rand(out_f, in_f, generator=g) * 2 - 1) * bound


class ColumnParallelLinear(nn.Module):
    def __init__(self, in_f, out_f, seed, r, w):
        super().__init__()
        assert out_f % w == 0
        shard = out_f // w
        full = _full_weight(out_f, in_f, seed)
        self.weight = nn.Parameter(full[r * shard:(r + 1) * shard].clone())
        self.bias = nn.Parameter(torch.zeros(shard))
        self.weight.tp_sharded = True
        self.bias.tp_sharded = True

    def forward(self, x):
        return F.linear(_CopyToTP.apply(x), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    def __init__(self, in_f, out_f, seed, r, w):
        super().__init__()
        shard = in_f // w
        full = _full_weight(out_f, in_f, seed)
        self.weight = nn.Parameter(full[:, r * shard:(r + 1) * shard].clone())
        self.weight.tp_sharded = True
        self.bias = nn.Parameter(torch.zeros(out_f))   # replicated, added after the reduce

    def forward(self, x):
        return _ReduceFromTP.apply(F.linear(x, self.weight)) + self.bias


class Block(nn.Module):
    def __init__(self, d, seed, tp_rank, tp_size):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.mix = nn.Parameter(torch.full((d,), 0.5))
        self.fc_in = ColumnParallelLinear(d, 4 * d, seed, tp_rank, tp_size)
        self.fc_out = RowParallelLinear(4 * d, d, seed + 1, tp_rank, tp_size)

    def forward(self, x):
        h = self.ln(x)
        prev = F.pad(h, (0, 0, 1, 0))[:, :-1]          # token shift
        h = self.mix * h + (1 - self.mix) * prev
        return x + self.fc_out(F.gelu(self.fc_in(h)))


class TPLM(nn.Module):
    def __init__(self, vocab, d, n_layer, ctx, seed, tp_rank=0, tp_size=1):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList([Block(d, seed + 10 * i, tp_rank, tp_size) for i in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def global_grad_norm(model, skip=()):
    sharded, replicated = torch.zeros(()), torch.zeros(())
    skip = {id(q) for q in skip}
    for p in model.parameters():
        if p.grad is None or id(p) in skip:
            continue
        sq = p.grad.detach().pow(2).sum()
        if getattr(p, "tp_sharded", False):
            sharded += sq
        else:
            replicated += sq
    dist.all_reduce(sharded)
    return (sharded + replicated).sqrt()


def sample_batch(g, bsz, ctx, vocab):
    # noisy periodic sequences: token[t] = (start + stride * t) % vocab, 10% random
    start = torch.randint(0, vocab, (bsz, 1), generator=g)
    stride = torch.randint(1, 4, (bsz, 1), generator=g)
    seq = (start + stride * torch.arange(ctx + 1)) % vocab
    noise = torch.rand(bsz, ctx + 1, generator=g) < 0.1
    seq = torch.where(noise, torch.randint(0, vocab, (bsz, ctx + 1), generator=g), seq)
    return seq[:, :-1], seq[:, 1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=48)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--grad-clip", type=float, default=0.5)
    ap.add_argument("--norm-clip", type=float, default=0.05)
    ap.add_argument("--log-interval", type=int, default=2)
    ap.add_argument("--zero-grad", choices=["top", "after"], default="top")
    ap.add_argument("--bug", default="none")
    args = ap.parse_args()

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))

    torch.manual_seed(args.seed)        # same seed everywhere -> replicated params agree
    model = TPLM(args.vocab, args.d_model, 2, args.ctx, seed=args.seed * 1000, tp_rank=rank, tp_size=world)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    assert dist.get_rank() == rank and dist.get_world_size() == world
    g = torch.Generator().manual_seed(args.seed + 1)
    norm_params = [q for m in model.modules() if isinstance(m, nn.LayerNorm) for q in m.parameters()]

    for step in range(args.steps):
        if args.zero_grad == "top":
            opt.zero_grad(set_to_none=True)
        x, y = sample_batch(g, args.batch, args.ctx, args.vocab)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()

        # LayerNorm params get their own (tighter) clip; their grads are identical on
        # every rank because all ranks see the same activations.
        if args.bug == "tp-clip-one-rank":
            if rank == 0 and step % args.log_interval == 0:
                ln_gn = torch.nn.utils.clip_grad_norm_(norm_params, args.norm_clip)
                print(f"  norm-param grad norm {ln_gn.item():.4f}")
        else:
            ln_gn = torch.nn.utils.clip_grad_norm_(norm_params, args.norm_clip)
            if rank == 0 and step % args.log_interval == 0:
                print(f"  norm-param grad norm {ln_gn.item():.4f}")

        total = global_grad_norm(model, skip=norm_params)
        if args.grad_clip > 0:
            coef = torch.clamp(args.grad_clip / (total + 1e-6), max=1.0)
            skip = {id(q) for q in norm_params}
            for p in model.parameters():
                if p.grad is not None and id(p) not in skip:
                    p.grad.mul_(coef)
        opt.step()
        if args.zero_grad == "after":
            opt.zero_grad(set_to_none=True)
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f} gnorm {total.item():.3f}")

    with torch.no_grad():
        gv = torch.Generator().manual_seed(4242)
        x, y = sample_batch(gv, 64, args.ctx, args.vocab)
        val = F.cross_entropy(model(x).reshape(-1, args.vocab), y.reshape(-1))
    del model, opt
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"final val_loss {val.item():.4f}")


if __name__ == "__main__":
    main()
