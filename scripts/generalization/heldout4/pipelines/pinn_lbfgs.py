"""Physics-informed neural network (PINN) for a 1-D boundary-value problem, optimised with L-BFGS.

Solves -u''(x) + k^2 u(x) = f(x) on [0, 1] with u(0) = u(1) = 0, where f is
chosen so that u*(x) = sin(pi x). The residual is computed with autograd
(second derivative via create_graph=True) at collocation points resampled
every step. Each step is one torch.optim.LBFGS.step(closure) call with a few
inner iterations and strong-Wolfe line search.
"""
import argparse
import math

import torch
import torch.nn as nn


class PINN(nn.Module):
    def __init__(self, hidden, depth):
        super().__init__()
        layers, d = [], 1
        for _ in range(depth):
            layers += [nn.Linear(d, hidden), nn.Tanh()]
            d = hidden
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def pde_residual(model, x, k):
    x = x.requires_grad_(True)
    u = model(x)
    (du,) = torch.autograd.grad(u.sum(), x, create_graph=True)
    (d2u,) = torch.autograd.grad(du.sum(), x, create_graph=True)
    f = (math.pi ** 2 + k ** 2) * torch.sin(math.pi * x)
    return -d2u + k ** 2 * u - f


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--collocation", type=int, default=32)
    ap.add_argument("--k", type=float, default=1.0)
    ap.add_argument("--max-iter", type=int, default=4)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)
    model = PINN(args.hidden, args.depth)
    optimizer = torch.optim.LBFGS(model.parameters(), lr=args.lr, max_iter=args.max_iter, history_size=10,
                                  line_search_fn="strong_wolfe")
    boundary = torch.tensor([[0.0], [1.0]])

    model.train()
    for step in range(args.steps):
        xc = torch.rand(args.collocation, 1, generator=gen)

        def closure():
            optimizer.zero_grad()
            res = pde_residual(model, xc.clone(), args.k)  # noqa: B023 (called at once by step)
            loss = res.pow(2).mean() + 10.0 * model(boundary).pow(2).mean()
            loss.backward()
            return loss

        loss = optimizer.step(closure)
        with torch.no_grad():
            xt = torch.linspace(0, 1, 50).unsqueeze(1)
            err = (model(xt) - torch.sin(math.pi * xt)).abs().max().item()
        print(f"step {step} loss {loss.item():.5f} max-abs-err {err:.4f}")


if __name__ == "__main__":
    main()
