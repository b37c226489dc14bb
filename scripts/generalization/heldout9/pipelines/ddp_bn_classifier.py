"""DDP (gloo) training of an MLP classifier with BatchNorm, DistributedSampler and MultiStepLR.

torchrun --nproc_per_node=2 ddp_bn_classifier.py --steps 8
Also runs as a single process (world size 1).
"""
import argparse
import gc
import os
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def init_distributed():
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend="gloo")
    else:
        dist.init_process_group(backend="gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.get_rank(), dist.get_world_size()


def spirals(n, n_cls=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, n_cls, (n,), generator=g)
    r = torch.rand(n, generator=g)
    t = 4.0 * r + 2.1 * y.float() + 0.2 * torch.randn(n, generator=g)
    x = torch.stack([r * torch.sin(t), r * torch.cos(t)], 1)
    feats = torch.cat([x, x ** 2, x[:, :1] * x[:, 1:], torch.sin(3 * x)], 1)
    return feats, y


class Classifier(nn.Module):
    def __init__(self, d_in=7, d=64, n_cls=3):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, d), nn.BatchNorm1d(d), nn.ReLU(),
            nn.Linear(d, d), nn.BatchNorm1d(d), nn.ReLU(),
            nn.Linear(d, n_cls),
        )

    def forward(self, x):
        return self.net(x)


def build(args):
    torch.manual_seed(args.seed)
    net = Classifier()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[args.steps // 2], gamma=0.2)
    return net, opt, sched


def run(args, net, opt, sched, rank, world):
    ds = TensorDataset(*spirals(2048, seed=args.seed))
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    model = DDP(net)

    step, micro, epoch = 0, 0, 0
    done = False
    while not done:
        sampler.set_epoch(epoch)
        for x, y in loader:
            model.train()
            if args.zero_grad == "top" and micro % args.accum == 0:
                opt.zero_grad(set_to_none=True)
            last_micro = (micro + 1) % args.accum == 0
            ctx = nullcontext() if last_micro else model.no_sync()
            with ctx:
                loss = F.cross_entropy(model(x), y) / args.accum
                loss.backward()
            micro += 1
            if not last_micro:
                continue
            opt.step()
            sched.step()
            if args.zero_grad == "after":
                opt.zero_grad(set_to_none=True)
            if rank == 0:
                print(f"step {step} loss {loss.item() * args.accum:.4f} lr {sched.get_last_lr()[0]:.4f}")
            step += 1
            if step >= args.steps:
                done = True
                break
        epoch += 1

    xv, yv = spirals(512, seed=10_000)
    model.eval()
    with torch.no_grad():
        acc = (model(xv).argmax(1) == yv).float().mean()
    dist.all_reduce(acc)
    return acc.item() / world


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--batch-size", type=int, default=32, help="per-rank micro-batch")
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--zero-grad", choices=["top", "after"], default="after")
    args = ap.parse_args()
    net, opt, sched = build(args)
    rank, world = init_distributed()
    acc = run(args, net, opt, sched, rank, world)
    del net, opt, sched
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"val_acc {acc:.4f}")
