"""Lipschitz-constrained SIREN (sine-activated implicit network with spectral-normalised hidden layers) fitting a synthetic 2D signal."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class SineLayer(nn.Module):
    def __init__(self, in_f, out_f, omega, first=False, spectral=False):
        super().__init__()
        self.omega = omega
        self.linear = nn.Linear(in_f, out_f)
        bound = 1.0 / in_f if first else math.sqrt(6.0 / in_f) / omega
        nn.init.uniform_(self.linear.weight, -bound, bound)
        if spectral:
            self.linear = nn.utils.spectral_norm(self.linear)

    def forward(self, x):
        return torch.sin(self.omega * self.linear(x))


class Siren(nn.Module):
    def __init__(self, hidden, depth, omega=30.0):
        super().__init__()
        layers = [SineLayer(2, hidden, omega, first=True)]
        layers += [SineLayer(hidden, hidden, 1.0, spectral=True) for _ in range(depth)]
        self.net = nn.Sequential(*layers)
        self.out = nn.Linear(hidden, 1)

    def forward(self, coords):
        return self.out(self.net(coords)).squeeze(-1)


def target_signal(coords):
    return torch.sin(3 * coords[:, 0]) * torch.cos(2 * coords[:, 1]) + 0.3 * coords[:, 0] ** 2


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--bug", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = Siren(args.hidden, depth=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(args.seed + 7)
    val_coords = torch.rand(64, 2, generator=g) * 2 - 1

    def validate():
        model.eval()
        with torch.no_grad():
            mse = F.mse_loss(model(val_coords), target_signal(val_coords)).item()
        model.train()
        return mse

    if args.bug == "spectral-eval-first":
        print(f"sanity val mse before training: {validate():.4f}")
    model.train()
    for step in range(args.steps):
        coords = torch.rand(args.batch_size, 2, generator=g) * 2 - 1
        optimizer.zero_grad()
        loss = F.mse_loss(model(coords), target_signal(coords))
        loss.backward()
        optimizer.step()
        print(f"step {step} mse {loss.item():.4f}")
    print(f"final val mse {validate():.4f}")
    return model


if __name__ == "__main__":
    main()
