"""Inference only: rolls out a (randomly initialised) neural cellular automaton on a small grid under
inference_mode; no training. --steps is the number of rollout batches."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class NCA(nn.Module):
    def __init__(self, channels, hidden):
        super().__init__()
        sobel = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8
        ident = torch.zeros(3, 3)
        ident[1, 1] = 1.0
        kernels = torch.stack([ident, sobel, sobel.t()])
        self.register_buffer("perceive_k", kernels.repeat(channels, 1, 1).unsqueeze(1))
        self.channels = channels
        self.update = nn.Sequential(nn.Conv2d(3 * channels, hidden, 1), nn.ReLU(), nn.Conv2d(hidden, channels, 1))

    def forward(self, state, fire_rate, gen):
        perception = F.conv2d(state, self.perceive_k, padding=1, groups=self.channels)
        delta = self.update(perception)
        fire = (torch.rand(state.shape[0], 1, *state.shape[2:], generator=gen) < fire_rate).float()
        alive = F.max_pool2d(state[:, 3:4], 3, stride=1, padding=1) > 0.1
        return (state + delta * fire) * alive.float()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--grid", type=int, default=16)
    p.add_argument("--rollout", type=int, default=6)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    model = NCA(8, 32).eval()
    with torch.inference_mode():
        for batch in range(args.steps):
            state = torch.zeros(args.batch_size, 8, args.grid, args.grid)
            state[:, 3:, args.grid // 2, args.grid // 2] = 1.0
            for _ in range(args.rollout):
                state = model(state, 0.5, gen)
            print(f"batch {batch} alive cells {(state[:, 3] > 0.1).float().sum().item():.0f}")


if __name__ == "__main__":
    main()
