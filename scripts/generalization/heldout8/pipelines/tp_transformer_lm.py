"""Hand-written 2-way tensor-parallel transformer LM (Megatron-style column/row parallel attention + MLP).
Embedding, LayerNorms and LM head are replicated; their grads are all-reduced (averaged). SGD with momentum."""
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


class ColumnParallelLinear(nn.Module):
    def __init__(self, fin, fout, world, rank, gen):
        super().__init__()
        full = torch.empty(fout, fin)
        nn.init.normal_(full, std=0.02, generator=gen)
        shard = fout // world
        self.weight = nn.Parameter(full[rank * shard:(rank + 1) * shard].clone())
        self.bias = nn.Parameter(torch.zeros(shard))

    def forward(self, x):
        return F.linear(_CopyToTP.apply(x), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    def __init__(self, fin, fout, world, rank, gen):
        super().__init__()
        full = torch.empty(fout, fin)
        nn.init.normal_(full, std=0.02, generator=gen)
        shard = fin // world
        self.weight = nn.Parameter(full[:, rank * shard:(rank + 1) * shard].clone())
        self.bias = nn.Parameter(torch.zeros(fout))

    def forward(self, x):
        return _ReduceFromTP.apply(F.linear(x, self.weight)) + self.bias


class TPBlock(nn.Module):
    def __init__(self, d, heads, world, rank, gen):
        super().__init__()
        self.local_heads = heads // world
        self.hd = d // heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = ColumnParallelLinear(d, 3 * d, world, rank, gen)
        self.proj = RowParallelLinear(d, d, world, rank, gen)
        self.ln2 = nn.LayerNorm(d)
        self.fc = ColumnParallelLinear(d, 4 * d, world, rank, gen)
        self.fc_out = RowParallelLinear(4 * d, d, world, rank, gen)

    def forward(self, x):
        B, T, _ = x.shape
        qkv = self.qkv(self.ln1(x)).view(B, T, 3, self.local_heads, self.hd).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, -1))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class TPLM(nn.Module):
    def __init__(self, vocab, d, heads, layers, world, rank, seed):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)  # identical full weights on every rank, then sliced
        self.tok_emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([TPBlock(d, heads, world, rank, gen) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok_emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


def replicated_parameters(model):
    for n, p in model.named_parameters():
        if not isinstance(_owner(model, n), (ColumnParallelLinear, RowParallelLinear)):
            yield p


def _owner(model, pname):
    return model.get_submodule(pname.rsplit(".", 1)[0])


def log_metrics(step, loss, model, max_norm):
    norm = torch.nn.utils.clip_grad_norm_(list(replicated_parameters(model)), max_norm)
    print(f"step {step} loss {loss:.4f} replicated_grad_norm {norm.item():.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=16)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # same replicated init on all ranks
    vocab = 40
    model = TPLM(vocab, args.d_model, 4, 2, world, rank, seed=args.seed + 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    data_gen = torch.Generator().manual_seed(args.seed + 2)  # TP ranks see the same batch
    for step in range(args.steps):
        idx = torch.randint(0, vocab, (args.batch_size, args.seq_len + 1), generator=data_gen)
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), idx[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for p in replicated_parameters(model):
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        if rank == 0:
            if args.bug == "tp-clip-one-rank":
                log_metrics(step, loss.item(), model, max_norm=0.25)
            else:
                print(f"step {step} loss {loss.item():.4f}")
        opt.step()
    with torch.no_grad():
        flat = torch.cat([p.flatten() for p in replicated_parameters(model)])
        ref = flat.clone()
        dist.broadcast(ref, 0)
        d = (flat - ref).abs().max().item()
    if rank == 1:
        print(f"replicated max diff vs rank0: {d:.3e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
