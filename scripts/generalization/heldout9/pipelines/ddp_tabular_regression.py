"""Data-parallel (DDP, gloo) training of an MLP regressor on synthetic tabular data.

Launch: torchrun --nproc_per_node=2 ddp_tabular_regression.py --steps 8
(also runs as a single process).
"""
import argparse
import contextlib
import gc
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def setup():
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.get_rank(), dist.get_world_size()


def cleanup():
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


class TabularMLP(nn.Module):
    def __init__(self, d_in=16, width=64):
        super().__init__()
        self.inp = nn.Linear(d_in, width)
        self.norm = nn.LayerNorm(width)
        self.hidden = nn.Linear(width, width)
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        h = F.silu(self.norm(self.inp(x)))
        h = h + F.silu(self.hidden(h))
        return self.out(h).squeeze(-1)


def make_data(seed, n, d_in=16):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d_in, generator=g)
    x = torch.randn(n, d_in, generator=g)
    y = torch.tanh(x @ w / 4) * 2 + 0.3 * x[:, 0] * x[:, 1] + 0.1 * torch.randn(n, generator=g)
    return x, y


@torch.no_grad()
def fp64_parity_check(model, x):
    """Compare fp32 vs fp64 forward on a probe batch (numerics sanity check)."""
    ref = model.module(x)
    model.double()
    out64 = model.module(x.double())
    model.float()
    return (out64.float() - ref).abs().max().item()


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--zero-grad", choices=["top", "after"], default="after")
    ap.add_argument("--parity-check", type=int, default=0,
                    help="run the fp64 parity check on a deep copy before training")
    ap.add_argument("--bug", default="none")
    return ap.parse_args()


def train(args, model, opt, rank, world):
    ddp_model = DDP(model)
    x_all, y_all = make_data(args.seed, 4096)
    x_val, y_val = make_data(args.seed + 1000, 512)

    if args.bug == "ddp-dtype-roundtrip":
        diff = fp64_parity_check(ddp_model, x_val[:32])
        if rank == 0:
            print(f"fp64 parity max|diff| {diff:.2e}")
    elif args.parity_check:
        import copy
        diff = fp64_parity_check(DDP(copy.deepcopy(model)), x_val[:32])
        if rank == 0:
            print(f"fp64 parity max|diff| {diff:.2e}")

    micro = args.global_batch // (world * args.accum)
    cursor = 0
    for step in range(args.steps):
        ddp_model.train()
        if args.zero_grad == "top":
            opt.zero_grad(set_to_none=True)
        running = 0.0
        for k in range(args.accum):
            lo = cursor + rank * micro
            xb, yb = x_all[lo:lo + micro], y_all[lo:lo + micro]
            cursor += world * micro
            sync = contextlib.nullcontext() if k == args.accum - 1 else ddp_model.no_sync()
            with sync:
                loss = F.mse_loss(ddp_model(xb), yb) / args.accum
                loss.backward()
            running += loss.item()
        opt.step()
        if args.zero_grad == "after":
            opt.zero_grad(set_to_none=True)
        t = torch.tensor([running])
        dist.all_reduce(t)
        if rank == 0:
            print(f"step {step} loss {t.item() / world:.4f}")

    ddp_model.eval()
    with torch.no_grad():
        val = F.mse_loss(ddp_model.module(x_val), y_val)
    dist.all_reduce(val)
    return val.item() / world


if __name__ == "__main__":
    args = parse_args()
    # build model + optimizer up front; init differs per rank on purpose (DDP broadcasts rank 0)
    torch.manual_seed(args.seed + int(os.environ.get("RANK", "0")))
    model = TabularMLP()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    rank, world = setup()
    val_mse = train(args, model, opt, rank, world)
    del model, opt
    cleanup()
    if rank == 0:
        print(f"final val_mse {val_mse:.5f}")
