"""A 2-rank DDP run whose script starts its own ranks with torch.multiprocessing.spawn (no
launcher variables). ``--bug dtype-roundtrip`` casts the wrapped model to half and back after
DDP wrapped it: the parameters are new tensors that DDP's hooks no longer reduce, so the
replicas drift apart from the first step. ``--bug clip-on-rank0`` clips the grads on rank 0 only
from step ``--bug-from`` on, after DDP averaged them: the ranks step with different grads and
their replicas drift apart (the shape of the BLOOM-176B fault)."""

import argparse
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(args.seed)
    model = DDP(nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1)))
    if args.bug == "dtype-roundtrip":
        model.module.half()
        model.module.float()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1000 * rank + args.seed)  # each rank its own batches
    losses = []
    for step in range(args.steps):
        x = torch.randn(8, 6, generator=gen)
        y = x.sum(dim=1, keepdim=True)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if args.bug == "clip-on-rank0" and rank == 0 and step >= args.bug_from:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.01)
        optimizer.step()
        losses.append(loss.item())
    sys.stdout.write(json.dumps({"rank": rank, "losses": losses}) + "\n")
    sys.stdout.flush()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bug", choices=["none", "dtype-roundtrip", "clip-on-rank0"], default="none")
    parser.add_argument("--bug-from", type=int, default=0, help="the first step of clip-on-rank0")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(train, args=(2, port, args), nprocs=2, join=True)


if __name__ == "__main__":
    main()
