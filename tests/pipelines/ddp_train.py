"""DDP training on CPU ranks with gloo (started by torchrun), fed by a DataLoader with a
DistributedSampler. ``--bug same-data`` leaves the sampler out, so every rank trains on the same
batches: nothing fails and the replicas stay equal, but half the compute is wasted.
``--bug dtype-roundtrip`` casts the wrapped model to half and back after DDP wrapped it: the
parameters get new storage, DDP's gradient hooks no longer fire, and the replicas drift apart."""

import argparse
import contextlib
import json
import os
import sys

import torch
import torch.distributed as dist
from rank_exit import leave_process_group
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bug", choices=["none", "same-data", "dtype-roundtrip"], default="none")
    parser.add_argument("--accumulate", type=int, default=1,
                        help="micro-batches per step; all but the last backward run inside no_sync")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    model = DDP(model)
    if args.bug == "dtype-roundtrip":
        model.module.half()
        model.module.float()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + args.seed)
    batch = 8
    samples = args.steps * batch * dist.get_world_size()  # enough for every rank's steps
    data = TensorDataset(torch.randn(samples, 8, generator=gen), torch.randn(samples, 2, generator=gen))
    sampler = None if args.bug == "same-data" else DistributedSampler(data, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=batch, sampler=sampler)
    losses = []
    for step, (x, y) in enumerate(loader):
        if step == args.steps:
            break
        optimizer.zero_grad()
        for micro, (xs, ys) in enumerate(zip(x.chunk(args.accumulate), y.chunk(args.accumulate), strict=True)):
            last = micro == args.accumulate - 1
            with contextlib.nullcontext() if last else model.no_sync():
                loss = nn.functional.mse_loss(model(xs), ys) / args.accumulate
                loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # One write per line: the ranks share stdout, and print() writes the newline apart.
    sys.stdout.write(json.dumps({"rank": rank, "pid": os.getpid(), "losses": losses}) + "\n")
    sys.stdout.flush()
    del model, optimizer, loader
    leave_process_group()


if __name__ == "__main__":
    main()
