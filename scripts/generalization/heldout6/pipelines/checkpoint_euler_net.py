"""Unrolled fixed-step Euler 'ODE' classifier on 2-D spirals; each integration step is wrapped in
torch.utils.checkpoint; Adadelta optimizer."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


class VectorField(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim + 1, dim), nn.Tanh(), nn.Linear(dim, dim))

    def forward(self, h, t):
        return self.net(torch.cat([h, t.expand(h.shape[0], 1)], dim=1))


class EulerClassifier(nn.Module):
    def __init__(self, dim, n_steps):
        super().__init__()
        self.lift = nn.Linear(2, dim)
        self.field = VectorField(dim)
        self.readout = nn.Linear(dim, 2)
        self.n_steps = n_steps

    def forward(self, x):
        h = self.lift(x)
        dt = 1.0 / self.n_steps
        for i in range(self.n_steps):
            t = torch.full((1, 1), i * dt)
            h = h + dt * checkpoint(self.field, h, t, use_reentrant=False)
        return self.readout(h)


def spirals(gen, n):
    y = torch.randint(0, 2, (n,), generator=gen)
    r = torch.rand(n, generator=gen) * 3 + 0.2
    theta = r * 2 + y * 3.1416
    x = torch.stack([r * theta.cos(), r * theta.sin()], 1) + 0.1 * torch.randn(n, 2, generator=gen)
    return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--euler-steps", type=int, default=6)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    model = EulerClassifier(args.dim, args.euler_steps)
    opt = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        x, y = spirals(gen, args.batch_size)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
