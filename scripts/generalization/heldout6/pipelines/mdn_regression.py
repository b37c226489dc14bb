"""Mixture density network fitting a multimodal 1-D conditional distribution."""
import argparse
import math

import torch
from torch import nn


class MDN(nn.Module):
    def __init__(self, hidden, n_comp):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, n_comp)
        self.mu = nn.Linear(hidden, n_comp)
        self.log_sigma = nn.Linear(hidden, n_comp)

    def forward(self, x):
        h = self.trunk(x)
        return self.pi(h).log_softmax(-1), self.mu(h), self.log_sigma(h).clamp(-5, 3)


def mdn_nll(log_pi, mu, log_sigma, y):
    z = (y - mu) / log_sigma.exp()
    log_prob = -0.5 * z.pow(2) - log_sigma - 0.5 * math.log(2 * math.pi)
    return -(log_pi + log_prob).logsumexp(-1).mean()


class Trainer:
    def __init__(self, model, opt, accum, reset_every):
        self.model, self.opt, self.accum = model, opt, accum
        self.reset_every = reset_every
        self.micro = 0

    def train_step(self, x, y):
        losses = []
        for xc, yc in zip(x.chunk(self.accum), y.chunk(self.accum), strict=True):
            loss = mdn_nll(*self.model(xc), yc) / self.accum
            loss.backward()
            losses.append(loss.item())
            self.micro += 1
        self.opt.step()
        self._reset_grads()
        return sum(losses)

    def _reset_grads(self):
        # clear once a full accumulation window (in micro-batches) has been consumed
        if self.micro % self.reset_every == 0:
            self.opt.zero_grad()


def sample(gen, n):
    x = torch.rand(n, 1, generator=gen) * 2 - 1
    branch = torch.randint(0, 2, (n, 1), generator=gen).float()
    y = torch.where(branch > 0, torch.sin(3 * x), -x ** 2) + 0.05 * torch.randn(n, 1, generator=gen)
    return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--bug", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    model = MDN(args.hidden, 4)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    accum = 2
    # window size in micro-batches; the buggy config counts it in samples instead
    window = accum * args.batch_size if args.bug == "no-zero-grad" else accum
    trainer = Trainer(model, opt, accum=accum, reset_every=window)
    for step in range(args.steps):
        x, y = sample(gen, args.batch_size)
        loss = trainer.train_step(x, y)
        print(f"step {step} nll {loss:.4f}")


if __name__ == "__main__":
    main()
