"""Replicas that never communicate after start-up (gloo, started by torchrun): every rank builds
the same model from the same seed and trains it on the same batches, so the replicas stay equal
without any collective. ``--die-at STEP`` makes the last rank leave at that step without a word
(``os._exit(0)``, as a node lost mid-run or a rank killed by the kernel would), while the others
train on; ``--drift-at STEP`` makes the last rank nudge its weights at that step."""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--die-at", type=int, default=None)
    parser.add_argument("--drift-at", type=int, default=None)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for step in range(args.steps):
        if args.die_at is not None and step == args.die_at and rank == world - 1:
            os._exit(0)
        x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 2, generator=gen)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if args.drift_at == step and rank == world - 1:
            with torch.no_grad():
                model[0].weight.add_(1e-3)
        losses.append(loss.item())
    # One write per line: the ranks share stdout, and print() writes the newline apart.
    sys.stdout.write(json.dumps({"rank": rank, "losses": losses}) + "\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
