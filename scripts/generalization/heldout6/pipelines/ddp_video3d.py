"""Tiny 3-D conv video clip classifier (moving-blob direction), 2-rank DDP over gloo with a DistributedSampler."""
import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Video3D(nn.Module):
    def __init__(self, ch, n_classes):
        super().__init__()
        self.stem = nn.Conv3d(1, ch, (3, 3, 3), padding=1)
        self.block = nn.Conv3d(ch, ch, (3, 3, 3), padding=1, stride=(1, 2, 2))
        self.norm = nn.GroupNorm(2, ch)
        self.fc = nn.Linear(ch, n_classes)

    def forward(self, x):
        h = F.relu(self.stem(x))
        h = F.relu(self.norm(self.block(h)))
        return self.fc(h.mean((2, 3, 4)))


def make_clips(gen, n, frames=6, size=8):
    labels = torch.randint(0, 4, (n,), generator=gen)
    clips = torch.zeros(n, 1, frames, size, size)
    start = torch.randint(2, size - 2, (n, 2), generator=gen)
    moves = torch.tensor([[0, 1], [0, -1], [1, 0], [-1, 0]])
    for i in range(n):
        for t in range(frames):
            r, c = (start[i] + moves[labels[i]] * t // 2) % size
            clips[i, 0, t, r, c] = 1.0
    return clips + 0.05 * torch.randn(clips.shape, generator=gen), labels


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--channels", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    clips, labels = make_clips(gen, 128)
    sampler = DistributedSampler(TensorDataset(clips, labels), shuffle=True, seed=args.seed)
    loader = DataLoader(TensorDataset(clips, labels), batch_size=args.batch_size, sampler=sampler)
    model = DDP(Video3D(args.channels, 4))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True)
    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            if step >= args.steps:
                break
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f}")
            step += 1
        epoch += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
