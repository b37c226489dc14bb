"""2-rank DDP (gloo, torchrun) training of a dilated Conv1d time-series classifier with a DistributedSampler
(set_epoch per epoch), Adam, and the loss all-reduced across ranks for logging."""
import argparse
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class DilatedConvNet(nn.Module):
    def __init__(self, channels=2, width=16, n_classes=3):
        super().__init__()
        self.conv_in = nn.Conv1d(channels, width, 3, padding=1)
        self.conv_d2 = nn.Conv1d(width, width, 3, padding=2, dilation=2)
        self.conv_d4 = nn.Conv1d(width, width, 3, padding=4, dilation=4)
        self.classifier = nn.Linear(width, n_classes)

    def forward(self, x):
        h = F.relu(self.conv_in(x))
        h = h + F.relu(self.conv_d2(h))
        h = h + F.relu(self.conv_d4(h))
        return self.classifier(h.mean(-1))


def make_series(seed, n=384, length=40):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 3, (n,), generator=gen)
    t = torch.arange(length).float()
    freq = (labels.float() + 1) * 0.15
    base = torch.sin(freq[:, None] * t + torch.rand(n, 1, generator=gen) * 2 * math.pi)
    second = torch.cos(0.5 * freq[:, None] * t)
    x = torch.stack([base, second], dim=1) + 0.4 * torch.randn(n, 2, length, generator=gen)
    return TensorDataset(x, labels)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--batch-size", type=int, default=16)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    dataset = make_series(args.seed)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = DDP(DilatedConvNet())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    step, epoch = 0, 0
    logged = torch.zeros(())
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            logged = loss.detach().clone()
            dist.all_reduce(logged, op=dist.ReduceOp.SUM)
            logged /= world
            step += 1
            if step >= args.steps:
                break
        epoch += 1

    if rank == 0:
        print(f"final loss {logged.item():.6f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
