"""Energy-based model on 2-D ring data, spectral-normalised energy net, short-run Langevin negatives."""
import argparse
import math

import torch
from torch import nn
from torch.nn.utils import spectral_norm


class EnergyNet(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = spectral_norm(nn.Linear(2, hidden))
        self.fc2 = spectral_norm(nn.Linear(hidden, hidden))
        self.out = spectral_norm(nn.Linear(hidden, 1))
        self.act = nn.SiLU()

    def forward(self, x):
        return self.out(self.act(self.fc2(self.act(self.fc1(x))))).squeeze(-1)


def ring(gen, n):
    theta = torch.rand(n, generator=gen) * 2 * math.pi
    r = 1.0 + 0.1 * torch.randn(n, generator=gen)
    return torch.stack([r * theta.cos(), r * theta.sin()], dim=1)


def langevin(energy, x, n_steps, step_size, gen):
    x = x.clone().requires_grad_(True)
    for _ in range(n_steps):
        grad, = torch.autograd.grad(energy(x).sum(), x)
        noise = torch.randn(x.shape, generator=gen)
        x = (x - 0.5 * step_size * grad + math.sqrt(step_size) * 0.1 * noise).detach().requires_grad_(True)
    return x.detach()


@torch.no_grad()
def energy_gap(model, pos, neg):
    return (model(neg).mean() - model(pos).mean()).item()


def prepare(model, seed, cfg):
    if cfg.get("check_init_energy"):
        check_gen = torch.Generator().manual_seed(seed + 1)
        model.eval()
        gap = energy_gap(model, ring(check_gen, 64), torch.rand(64, 2, generator=check_gen) * 4 - 2)
        print(f"init energy gap {gap:.4f}")
    model.train()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--bug", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    model = EnergyNet(args.hidden)
    prepare(model, args.seed, {"check_init_energy": args.bug == "spectral-eval-first"})
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.0, 0.999))
    for step in range(args.steps):
        pos = ring(gen, args.batch_size)
        init = torch.rand(args.batch_size, 2, generator=gen) * 4 - 2
        neg = langevin(model, init, n_steps=5, step_size=0.1, gen=gen)
        loss = model(pos).mean() - model(neg).mean() + 0.1 * (model(pos) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} cd-loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
