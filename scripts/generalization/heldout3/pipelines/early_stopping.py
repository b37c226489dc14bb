"""Polynomial-feature regression network with validation-based early stopping (patience,
min_delta); usually stops before --steps and restores the best weights.
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_data(gen, n):
    x = torch.rand(n, 1, generator=gen) * 4 - 2
    y = 0.5 * x**3 - x + 0.1 * torch.randn(n, 1, generator=gen)
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--patience", type=int, default=2)
    ap.add_argument("--min-delta", type=float, default=0.05)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    x_tr, y_tr = make_data(gen, 128)
    x_va, y_va = make_data(gen, 64)
    net = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(),
                        nn.Linear(32, 1))
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)

    best, best_state, bad = float("inf"), None, 0
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        idx = torch.randint(0, 128, (32,), generator=gen)
        loss = F.mse_loss(net(x_tr[idx]), y_tr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        net.eval()
        with torch.no_grad():
            val = F.mse_loss(net(x_va), y_va).item()
        net.train()
        if val < best - args.min_delta:
            best, best_state, bad = val, copy.deepcopy(net.state_dict()), 0
        else:
            bad += 1
            if bad >= args.patience:
                print(f"early stop after {step + 1} steps (best val {best:.5f})")
                break
    if best_state is not None:
        net.load_state_dict(best_state)
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
