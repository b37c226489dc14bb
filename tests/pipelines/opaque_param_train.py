"""A tiny model with one parameter of a subclass that, with ``--opaque``, refuses ``data_ptr``
(a program may hide its storage), so the agent cannot fingerprint it; the training itself never
asks for it. Without ``--opaque`` the same subclass is an ordinary parameter.

Under ``torchrun`` the ranks average their grads (gloo), so every parameter is equal on every
rank; ``--opaque-rank R`` hides the storage on that rank only."""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn

OPAQUE = [False]


class OpaqueParameter(nn.Parameter):
    def data_ptr(self) -> int:
        if OPAQUE[0]:
            raise RuntimeError("this parameter does not expose its storage")
        return super().data_ptr()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--opaque", action="store_true")
    parser.add_argument("--opaque-rank", type=int, default=None)
    args = parser.parse_args()
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    OPAQUE[0] = args.opaque or args.opaque_rank == rank

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    model[2].weight = OpaqueParameter(model[2].weight.detach().clone())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randn(32, 4)
    losses = []
    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if distributed:
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad.div_(dist.get_world_size())
        optimizer.step()
        losses.append(loss.item())
    print(json.dumps({"losses": losses}))
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
