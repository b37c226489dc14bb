"""2-rank DDP training of a gated linear recurrent unit (LRU-style) sequence classifier on synthetic sequences."""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class GatedLinearRecurrence(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.in_proj = nn.Linear(dim, 2 * dim)
        self.decay_logit = nn.Parameter(torch.linspace(-2.0, 2.0, dim))
        self.out_proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        u, gate = self.in_proj(self.norm(x)).chunk(2, dim=-1)
        a = torch.sigmoid(self.decay_logit)
        h = torch.zeros_like(u[:, 0])
        states = []
        for t in range(u.shape[1]):
            h = a * h + (1 - a) * u[:, t]
            states.append(h)
        y = torch.stack(states, dim=1) * F.silu(gate)
        return x + self.out_proj(y)


class LRUClassifier(nn.Module):
    def __init__(self, in_dim, dim, depth, n_classes):
        super().__init__()
        self.encoder = nn.Linear(in_dim, dim)
        self.layers = nn.ModuleList(GatedLinearRecurrence(dim) for _ in range(depth))
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x):
        h = self.encoder(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h.mean(dim=1))


def make_shard(n, seq_len, in_dim, n_classes, seed, rank):
    g = torch.Generator().manual_seed(seed * 100 + rank)
    x = torch.randn(n, seq_len, in_dim, generator=g)
    y = (x[:, :, 0].cumsum(dim=1)[:, -1] > 0).long() + (x[:, -1, 1] > 0.5).long()
    return x, y.clamp(max=n_classes - 1)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--dim", type=int, default=24)
    p.add_argument("--bug", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)

    model = LRUClassifier(in_dim=6, dim=args.dim, depth=2, n_classes=3)
    ddp_model = DDP(model)
    if args.bug == "ddp-dtype-roundtrip":
        # "precision check" of the initial logits in float64, then back to fp32
        model.double()
        with torch.no_grad():
            ref = model(torch.zeros(1, 4, 6, dtype=torch.float64))
        model.float()
        if rank == 0:
            print(f"init logits fp64 check: {ref.abs().max().item():.4f}")
    optimizer = torch.optim.AdamW(ddp_model.parameters(), lr=args.lr, weight_decay=0.01)

    x, y = make_shard(args.batch_size * args.steps, 12, 6, 3, args.seed, rank)
    for step in range(args.steps):
        sl = slice(step * args.batch_size, (step + 1) * args.batch_size)
        optimizer.zero_grad()
        loss = F.cross_entropy(ddp_model(x[sl]), y[sl])
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()
    return model


if __name__ == "__main__":
    main()
