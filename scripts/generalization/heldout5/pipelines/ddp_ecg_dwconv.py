"""2-rank DDP (gloo) training of a depthwise-separable 1D-conv ECG-like beat classifier; each rank reads its own shard of synthetic beats."""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class DWSeparable(nn.Module):
    def __init__(self, c_in, c_out, k):
        super().__init__()
        self.depthwise = nn.Conv1d(c_in, c_in, k, padding=k // 2, groups=c_in)
        self.pointwise = nn.Conv1d(c_in, c_out, 1)
        self.bn = nn.BatchNorm1d(c_out)

    def forward(self, x):
        return F.relu(self.bn(self.pointwise(self.depthwise(x))))


class BeatNet(nn.Module):
    def __init__(self, width, n_classes):
        super().__init__()
        self.stem = nn.Conv1d(1, width, 7, padding=3, stride=2)
        self.blocks = nn.Sequential(DWSeparable(width, width, 5), DWSeparable(width, 2 * width, 5))
        self.head = nn.Linear(2 * width, n_classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean(dim=-1))


def beats(n, g):
    labels = torch.randint(0, 3, (n,), generator=g)
    t = torch.linspace(-1, 1, 48)
    width = 0.05 + 0.05 * labels.float().view(-1, 1)
    x = torch.exp(-(t ** 2) / width) + 0.1 * torch.randn(n, 48, generator=g)
    return x.unsqueeze(1), labels


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--width", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    model = BeatNet(args.width, 3)
    ddp_model = DDP(model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr, momentum=0.9, nesterov=True)
    g = torch.Generator().manual_seed(args.seed * 17 + rank)
    for step in range(args.steps):
        x, y = beats(args.batch_size, g)
        optimizer.zero_grad()
        loss = F.cross_entropy(ddp_model(x), y)
        loss.backward()
        optimizer.step()
        reduced = loss.detach().clone()
        dist.all_reduce(reduced)
        if rank == 0:
            print(f"step {step} mean loss {reduced.item() / dist.get_world_size():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
