"""Two-rank DDP training on CPU with gloo (started by torchrun)."""

import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(4):
        x = torch.randn(16, 8, generator=gen)
        y = torch.randn(16, 2, generator=gen)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(json.dumps({"rank": rank, "pid": os.getpid(), "losses": losses}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
