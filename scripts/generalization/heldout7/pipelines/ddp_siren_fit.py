"""SIREN (sinusoidal representation network) fitted to a procedural 2-D image with 2-rank DDP.

Each rank samples its own random pixel coordinates every step; gradients are averaged by DDP.
Adam + cosine annealing. Launch: torchrun --nproc_per_node=2 ddp_siren_fit.py --steps 10
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class SineLayer(nn.Module):
    def __init__(self, fan_in, fan_out, omega=30.0, first=False):
        super().__init__()
        self.omega = omega
        self.linear = nn.Linear(fan_in, fan_out)
        bound = 1.0 / fan_in if first else math.sqrt(6.0 / fan_in) / omega
        with torch.no_grad():
            self.linear.weight.uniform_(-bound, bound)

    def forward(self, x):
        return torch.sin(self.omega * self.linear(x))


class Siren(nn.Module):
    def __init__(self, hidden=48, depth=3, out_ch=3):
        super().__init__()
        layers = [SineLayer(2, hidden, first=True)]
        layers += [SineLayer(hidden, hidden) for _ in range(depth - 1)]
        self.net = nn.Sequential(*layers)
        self.to_rgb = nn.Linear(hidden, out_ch)

    def forward(self, coords):
        return self.to_rgb(self.net(coords))


def target_image(coords):
    x, y = coords[:, 0], coords[:, 1]
    r = torch.sin(4 * x) * torch.cos(3 * y)
    g = torch.exp(-4 * (x**2 + y**2))
    b = torch.tanh(2 * x * y)
    return torch.stack([r, g, b], dim=1)


@torch.no_grad()
def fp64_consistency_check(model, coords):
    """Compare the float32 forward against a float64 forward (catches numerically unstable inits)."""
    ref32 = model(coords)
    model.double()
    ref64 = model(coords.double())
    model.float()
    return (ref32.double() - ref64).abs().max().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bug", choices=["ddp-dtype-roundtrip"], default=None)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=48)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    model = Siren(hidden=args.hidden)
    probe = torch.rand(64, 2, generator=torch.Generator().manual_seed(args.seed)) * 2 - 1

    check_before_wrap = args.bug != "ddp-dtype-roundtrip"
    if check_before_wrap:
        err = fp64_consistency_check(model, probe)
    ddp_model = DDP(model)
    if not check_before_wrap:
        err = fp64_consistency_check(ddp_model, probe)
    if rank == 0:
        print(f"fp32 vs fp64 max abs diff at init: {err:.2e}")

    opt = torch.optim.Adam(ddp_model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(args.steps, 1), eta_min=args.lr * 0.1)
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    losses = []
    for step in range(args.steps):
        coords = torch.rand(args.batch_size, 2, generator=gen) * 2 - 1
        loss = (ddp_model(coords) - target_image(coords)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if rank == 0:
            print(f"step {step:3d} mse {loss.item():.5f}")

    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    if rank == 0:
        print(f"max param difference across ranks: {(gathered[0] - gathered[1]).abs().max().item():.3e}")
    if args.save:
        torch.save({"state": model.state_dict(), "losses": losses}, f"{args.save}.rank{rank}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
