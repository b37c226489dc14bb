"""Conditional diffusion denoiser for 2-D point clouds (class-conditional), 2-rank DDP over gloo."""
import argparse
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Denoiser(nn.Module):
    def __init__(self, hidden, n_classes):
        super().__init__()
        self.class_emb = nn.Embedding(n_classes, hidden)
        self.time_proj = nn.Linear(16, hidden)
        self.inp = nn.Linear(2, hidden)
        self.block = nn.Sequential(nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.out = nn.Linear(hidden, 2)

    def forward(self, x, t, y):
        freqs = torch.exp(torch.arange(8, dtype=x.dtype) * (-math.log(1000.0) / 8))
        ang = t[:, None] * freqs[None]
        temb = torch.cat([ang.sin(), ang.cos()], dim=-1)
        h = self.inp(x) + self.time_proj(temb) + self.class_emb(y)
        return self.out(h + self.block(h))


def sample_points(gen, n, n_classes):
    y = torch.randint(0, n_classes, (n,), generator=gen)
    centers = torch.stack([torch.cos(y * 2 * math.pi / n_classes), torch.sin(y * 2 * math.pi / n_classes)], 1)
    return centers * 2 + 0.2 * torch.randn(n, 2, generator=gen), y


def setup_precision(model, precision):
    # run the weights through the requested storage precision, then compute in fp32
    if precision == "fp64-master":
        model.double()
    return model.float()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--bug", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed * 100 + rank)

    n_classes, n_t = 4, 50
    betas = torch.linspace(1e-4, 0.05, n_t)
    alpha_bar = torch.cumprod(1 - betas, 0)
    model = DDP(Denoiser(args.hidden, n_classes))
    precision = "fp64-master" if args.bug == "ddp-dtype-roundtrip" else "fp32"
    model = setup_precision(model, precision)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    for step in range(args.steps):
        x0, y = sample_points(gen, args.batch_size, n_classes)
        t = torch.randint(0, n_t, (args.batch_size,), generator=gen)
        noise = torch.randn(x0.shape, generator=gen)
        ab = alpha_bar[t][:, None]
        xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
        loss = F.mse_loss(model(xt, t.float(), y), noise)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
