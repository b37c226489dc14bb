"""Full-batch Rprop training of a weight-normalised (parametrizations.weight_norm) polynomial-feature regressor with clip_grad_value_."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm


class WNRegressor(nn.Module):
    def __init__(self, degree, hidden):
        super().__init__()
        self.degree = degree
        self.fc1 = weight_norm(nn.Linear(2 * degree, hidden))
        self.fc2 = weight_norm(nn.Linear(hidden, hidden))
        self.out = nn.Linear(hidden, 1)

    def features(self, x):
        return torch.cat([x.pow(d) for d in range(1, self.degree + 1)], dim=-1)

    def forward(self, x):
        h = torch.tanh(self.fc1(self.features(x)))
        return self.out(torch.tanh(self.fc2(h))).squeeze(-1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--n-points", type=int, default=32)
    p.add_argument("--clip-value", type=float, default=0.5)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = WNRegressor(degree=3, hidden=16)
    optimizer = torch.optim.Rprop(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(args.seed)
    x = torch.rand(args.n_points, 2, generator=g) * 2 - 1
    y = x[:, 0] * x[:, 1] - 0.5 * x[:, 0].pow(3)
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        nn.utils.clip_grad_value_(model.parameters(), args.clip_value)
        optimizer.step()
        print(f"step {step} mse {loss.item():.5f}")


if __name__ == "__main__":
    main()
