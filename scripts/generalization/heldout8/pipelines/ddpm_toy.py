"""DDPM-style denoiser on 2D swiss-roll points: epsilon prediction with sinusoidal timestep embedding,
bf16 autocast, LambdaLR linear warmup, EMA weights updated under no_grad, and a short EMA sampling pass."""
import argparse
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half).float() / half)
    a = t.float()[:, None] * freqs[None]
    return torch.cat([torch.sin(a), torch.cos(a)], -1)


class Denoiser(nn.Module):
    def __init__(self, hidden, temb):
        super().__init__()
        self.temb = temb
        self.t_mlp = nn.Sequential(nn.Linear(temb, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.inp = nn.Linear(2, hidden)
        self.res = nn.ModuleList([nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden), nn.SiLU())
                                  for _ in range(2)])
        self.out = nn.Linear(hidden, 2)

    def forward(self, x, t):
        h = self.inp(x) + self.t_mlp(timestep_embedding(t, self.temb))
        for r in self.res:
            h = h + r(h)
        return self.out(h)


def swiss_roll(g, n):
    t = 1.5 * math.pi * (1 + 2 * torch.rand(n, generator=g))
    return torch.stack([t * torch.cos(t), t * torch.sin(t)], 1) / 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--timesteps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--ema-decay", type=float, default=0.995)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 77)
    betas = torch.linspace(1e-4, 0.02, args.timesteps)
    alphas_bar = torch.cumprod(1 - betas, 0)
    model = Denoiser(64, 16)
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / args.warmup))
    for step in range(args.steps):
        x0 = swiss_roll(g, args.batch_size)
        t = torch.randint(0, args.timesteps, (args.batch_size,), generator=g)
        noise = torch.randn(x0.shape, generator=g)
        ab = alphas_bar[t][:, None]
        xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pred = model(xt, t)
        loss = F.mse_loss(pred.float(), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            for pe, p in zip(ema.parameters(), model.parameters(), strict=True):
                pe.mul_(args.ema_decay).add_(p, alpha=1 - args.ema_decay)
        print(f"step {step} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e}")
    with torch.no_grad():
        x = torch.randn(64, 2, generator=g)
        for i in reversed(range(0, args.timesteps, max(1, args.timesteps // 10))):
            t = torch.full((64,), i)
            eps = ema(x, t)
            x = (x - betas[i] / (1 - alphas_bar[i]).sqrt() * eps) / (1 - betas[i]).sqrt()
    print(f"sample std {x.std().item():.3f}")


if __name__ == "__main__":
    main()
