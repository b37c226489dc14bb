"""2-rank DDP (gloo) image-patch classifier with gradient accumulation via no_sync(), OneCycleLR,
gradient clipping, and a rank-0-only metrics print."""
import argparse
import contextlib

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class PatchNet(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.norm = nn.GroupNorm(4, width)
        self.body = nn.Conv2d(width, width, 3, padding=1)
        self.fc = nn.Linear(width, 5)

    def forward(self, x):
        x = F.relu(self.norm(self.stem(x)))
        x = F.relu(self.body(x)) + x
        return self.fc(x.mean((2, 3)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--width", type=int, default=8)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed * 7 + rank)
    model = DDP(PatchNet(args.width))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.3)
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        for micro in range(args.accum):
            x = torch.randn(args.batch_size, 3, 10, 10, generator=g)
            y = (x[:, 0].mean((1, 2)) > 0).long() + 2 * (x[:, 1].mean((1, 2)) > 0).long()
            ctx = model.no_sync() if micro < args.accum - 1 else contextlib.nullcontext()
            with ctx:
                loss = F.cross_entropy(model(x), y) / args.accum
                loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        opt.step()
        sched.step()
        if rank == 0:
            print(f"step {step} loss {loss.item() * args.accum:.4f} gnorm {gn.item():.3f}")
    del model
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
