"""2-rank DDP training of a small LSTM+linear-attention load forecaster with gradient accumulation.

Micro-batches inside an accumulation window run under ``ddp.no_sync()`` so the all-reduce only
happens on the last micro-batch; DistributedSampler with set_epoch; Adagrad; PolynomialLR.
Launch: torchrun --nproc_per_node=2 ddp_nosync_forecaster.py --steps 6
"""
from __future__ import annotations

import argparse
import contextlib

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Forecaster(nn.Module):
    def __init__(self, hidden, horizon):
        super().__init__()
        self.rnn = nn.LSTM(2, hidden, batch_first=True)
        self.query = nn.Parameter(torch.randn(hidden) / hidden**0.5)
        self.out = nn.Linear(2 * hidden, horizon)

    def forward(self, x):
        h, (last, _) = self.rnn(x)
        att = torch.softmax(h @ self.query, dim=1).unsqueeze(-1)
        ctx = (att * h).sum(1)
        return self.out(torch.cat([ctx, last[-1]], -1))


def make_data(gen, n, length=32, horizon=4):
    t = torch.arange(length + horizon).float()
    daily = torch.sin(2 * torch.pi * (t / 12 + torch.rand(n, 1, generator=gen)))
    trend = 0.02 * t * torch.randn(n, 1, generator=gen)
    load = daily + trend + 0.1 * torch.randn(n, length + horizon, generator=gen)
    temp = torch.cos(2 * torch.pi * t / 12).expand(n, -1)
    x = torch.stack([load[:, :length], temp[:, :length]], -1)
    return x, load[:, length:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--accum", type=int, default=2)
    args = ap.parse_args()

    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    x, y = make_data(torch.Generator().manual_seed(args.seed), 400)
    ds = TensorDataset(x, y)
    sampler = DistributedSampler(ds, shuffle=True, seed=args.seed)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    ddp = DistributedDataParallel(Forecaster(args.hidden, 4))
    opt = torch.optim.Adagrad(ddp.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=max(args.steps, 1), power=1.0)

    done, micro, epoch = 0, 0, 0
    while done < args.steps:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            last_micro = (micro + 1) % args.accum == 0
            ctx = contextlib.nullcontext() if last_micro else ddp.no_sync()
            with ctx:
                loss = nn.functional.mse_loss(ddp(xb), yb) / args.accum
                loss.backward()
            micro += 1
            if not last_micro:
                continue
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            if rank == 0:
                print(f"epoch {epoch} update {done} loss {loss.item() * args.accum:.4f}")
            done += 1
            if done >= args.steps:
                break
        epoch += 1

    flat = torch.nn.utils.parameters_to_vector(ddp.parameters()).detach()
    both = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(both, flat)
    if rank == 0:
        print(f"replica max diff {(both[0] - both[1]).abs().max().item():.2e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
