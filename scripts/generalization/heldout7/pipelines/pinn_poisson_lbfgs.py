"""Physics-informed network solving u''(x) = -pi^2 sin(pi x) on [0, 1] with u(0)=u(1)=0.

Derivatives via torch.autograd.grad(create_graph=True). The first ``--adam-steps`` updates use Adam;
then the optimizer is re-created as L-BFGS (strong-Wolfe line search) and stepped with a closure.
Each optimizer.step() call counts as one step.
"""
from __future__ import annotations

import argparse
import math

import torch
from torch import nn


class PINN(nn.Module):
    def __init__(self, width=20):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(1, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                               nn.Linear(width, 1))

    def forward(self, x):
        return self.f(x)


def residual_loss(net, x_col, x_bc):
    x = x_col.clone().requires_grad_(True)
    u = net(x)
    (du,) = torch.autograd.grad(u.sum(), x, create_graph=True)
    (d2u,) = torch.autograd.grad(du.sum(), x, create_graph=True)
    pde = d2u + math.pi**2 * torch.sin(math.pi * x)
    return pde.pow(2).mean() + 10.0 * net(x_bc).pow(2).mean()


def make_closure(optimizer, net, x_col, x_bc):
    def closure():
        optimizer.zero_grad()
        loss = residual_loss(net, x_col, x_bc)
        loss.backward()
        return loss

    return closure


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--width", type=int, default=20)
    ap.add_argument("--n-collocation", type=int, default=64)
    ap.add_argument("--adam-steps", type=int, default=4)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    x_col = torch.rand(args.n_collocation, 1, generator=gen)
    x_bc = torch.tensor([[0.0], [1.0]])
    net = PINN(args.width)
    x_test = torch.linspace(0, 1, 101).unsqueeze(1)

    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
    phase = "adam"
    for step in range(args.steps):
        if step == args.adam_steps and phase == "adam":
            optimizer = torch.optim.LBFGS(net.parameters(), lr=1.0, max_iter=5, history_size=10,
                                          line_search_fn="strong_wolfe")
            phase = "lbfgs"

        loss = optimizer.step(make_closure(optimizer, net, x_col, x_bc))
        with torch.no_grad():
            err = (net(x_test) - torch.sin(math.pi * x_test)).abs().max().item()
        print(f"[{phase}] step {step} loss {float(loss.detach()):.5f} max_err {err:.4f}")


if __name__ == "__main__":
    main()
