"""RealNVP-style normalizing flow with affine coupling layers on 2-D two-moons-like data."""
import argparse
import math

import torch
from torch import nn


def init_coupling_net(m):
    if isinstance(m, nn.Linear):
        nn.init.kaiming_uniform_(m.weight, a=0.2)
        nn.init.uniform_(m.bias, -0.05, 0.05)


class AffineCoupling(nn.Module):
    def __init__(self, dim, hidden, mask):
        super().__init__()
        self.register_buffer("mask", mask)
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.LeakyReLU(0.2),
                                 nn.Linear(hidden, hidden), nn.LeakyReLU(0.2),
                                 nn.Linear(hidden, 2 * dim))
        self.net.apply(init_coupling_net)
        self.scale = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        xm = x * self.mask
        s, t = self.net(xm).chunk(2, dim=-1)
        s = torch.tanh(s) * self.scale.exp() * (1 - self.mask)
        t = t * (1 - self.mask)
        y = xm + (1 - self.mask) * (x * s.exp() + t)
        return y, s.sum(-1)


class RealNVP(nn.Module):
    def __init__(self, dim=2, hidden=32, n_layers=4):
        super().__init__()
        masks = [torch.tensor([1.0, 0.0]) if i % 2 == 0 else torch.tensor([0.0, 1.0]) for i in range(n_layers)]
        self.layers = nn.ModuleList(AffineCoupling(dim, hidden, m) for m in masks)

    def log_prob(self, x):
        logdet = torch.zeros(x.shape[0])
        for layer in self.layers:
            x, ld = layer(x)
            logdet = logdet + ld
        base = -0.5 * x.pow(2).sum(-1) - x.shape[1] * 0.5 * math.log(2 * math.pi)
        return base + logdet


def moons(gen, n):
    t = torch.rand(n, generator=gen) * math.pi
    upper = torch.rand(n, generator=gen) < 0.5
    x = torch.where(upper, t.cos(), 1 - t.cos())
    y = torch.where(upper, t.sin(), 0.5 - t.sin())
    return torch.stack([x, y], 1) + 0.05 * torch.randn(n, 2, generator=gen)


def build(args):
    model = RealNVP(hidden=args.hidden, n_layers=args.layers)
    if args.bug == "double-init":
        # legacy setup path: re-run the coupling initialiser over the whole flow
        model.apply(init_coupling_net)
    return model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--bug", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    model = build(args)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        loss = -model.log_prob(moons(gen, args.batch_size)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} nll {loss.item():.4f}")


if __name__ == "__main__":
    main()
