"""Full-batch L-BFGS fit of a physics-style surrogate: a frozen random-Fourier-feature layer followed by
a trainable MLP, with a closure and zero_grad(set_to_none=False)."""
import argparse
import math

import torch
import torch.nn as nn


class FourierSurrogate(nn.Module):
    def __init__(self, n_freq, hidden, scale):
        super().__init__()
        self.rff = nn.Linear(2, n_freq)
        nn.init.normal_(self.rff.weight, std=scale)
        nn.init.uniform_(self.rff.bias, 0, 2 * math.pi)
        self.rff.requires_grad_(False)  # fixed random features
        self.net = nn.Sequential(nn.Linear(2 * n_freq, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x):
        h = self.rff(x)
        return self.net(torch.cat([torch.sin(h), torch.cos(h)], -1)).squeeze(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--history-size", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--n-points", type=int, default=128)
    ap.add_argument("--fourier-scale", type=float, default=1.0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 3)
    x = torch.rand(args.n_points, 2, generator=g) * 2 - 1
    y = torch.sin(3 * x[:, 0]) * torch.cos(2 * x[:, 1]) + 0.01 * torch.randn(args.n_points, generator=g)
    model = FourierSurrogate(16, args.hidden, args.fourier_scale)
    opt = torch.optim.LBFGS([p for p in model.parameters() if p.requires_grad], lr=args.lr,
                            max_iter=4, history_size=args.history_size, line_search_fn="strong_wolfe")
    n_evals = 0

    def closure():
        nonlocal n_evals
        n_evals += 1
        opt.zero_grad(set_to_none=False)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    for step in range(args.steps):
        loss = opt.step(closure)
        print(f"step {step} loss {loss.item():.6f} closure_evals {n_evals}")


if __name__ == "__main__":
    main()
