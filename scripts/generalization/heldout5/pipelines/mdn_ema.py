"""Mixture density network for a multimodal 1D inverse problem, with an exponential moving average (EMA) copy of the weights used for evaluation."""
import argparse
import math

import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


class MixtureDensityNet(nn.Module):
    def __init__(self, hidden, n_mix):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, n_mix)
        self.mu = nn.Linear(hidden, n_mix)
        self.log_sigma = nn.Linear(hidden, n_mix)

    def forward(self, x):
        h = self.body(x)
        return self.pi(h).log_softmax(-1), self.mu(h), self.log_sigma(h).clamp(-5, 3)


def mdn_nll(log_pi, mu, log_sigma, y):
    z = (y - mu) / log_sigma.exp()
    log_prob = -0.5 * z.pow(2) - log_sigma - 0.5 * math.log(2 * math.pi)
    return -torch.logsumexp(log_pi + log_prob, dim=-1).mean()


def sample(n, g):
    y = torch.rand(n, 1, generator=g) * 2 - 1
    x = y + 0.3 * torch.sin(3 * y) + 0.05 * torch.randn(n, 1, generator=g)
    return x, y  # inverse mapping x -> y is multimodal


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--ema-decay", type=float, default=0.9)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = MixtureDensityNet(hidden=24, n_mix=3)
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(args.ema_decay))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(args.seed)
    val_x, val_y = sample(64, g)
    for step in range(args.steps):
        x, y = sample(args.batch_size, g)
        optimizer.zero_grad()
        loss = mdn_nll(*model(x), y)
        loss.backward()
        optimizer.step()
        ema.update_parameters(model)
        with torch.no_grad():
            val = mdn_nll(*ema(val_x), val_y).item()
        print(f"step {step} nll {loss.item():.4f} ema_val_nll {val:.4f}")


if __name__ == "__main__":
    main()
