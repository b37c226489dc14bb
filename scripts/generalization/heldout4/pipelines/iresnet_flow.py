"""Invertible residual network (i-ResNet) normalizing flow on 2-D toy densities.

Each block is x + c * g(x) where g is a small MLP whose linear layers are
spectrally normalised (Lipschitz < 1 keeps the block invertible). Since the
data is 2-D the log-determinant of (I + J_g) is computed exactly from the
Jacobian. Trained by maximum likelihood under a standard normal base density;
a held-out NLL is reported at the end.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import spectral_norm


def sample_rings(gen, n):
    radius = torch.where(torch.rand(n, generator=gen) < 0.5, torch.tensor(1.0), torch.tensor(2.0))
    theta = 2 * math.pi * torch.rand(n, generator=gen)
    pts = torch.stack([radius * theta.cos(), radius * theta.sin()], dim=1)
    return pts + 0.08 * torch.randn(n, 2, generator=gen)


class ResidualFlowBlock(nn.Module):
    def __init__(self, dim, hidden, coeff=0.9, n_power_iterations=1):
        super().__init__()
        self.coeff = coeff
        self.fc1 = spectral_norm(nn.Linear(dim, hidden), n_power_iterations=n_power_iterations)
        self.fc2 = spectral_norm(nn.Linear(hidden, hidden), n_power_iterations=n_power_iterations)
        self.fc3 = spectral_norm(nn.Linear(hidden, dim), n_power_iterations=n_power_iterations)

    def g(self, x):
        return self.coeff * self.fc3(F.elu(self.fc2(F.elu(self.fc1(x)))))

    def forward(self, x):
        # exact log|det(I + J_g)| for low-dimensional inputs
        if not x.requires_grad:
            x = x.requires_grad_(True)
        gx = self.g(x)
        rows = []
        for i in range(x.shape[1]):
            (row,) = torch.autograd.grad(gx[:, i].sum(), x, create_graph=True)
            rows.append(row)
        jac = torch.stack(rows, dim=1) + torch.eye(x.shape[1])
        logdet = torch.linalg.slogdet(jac)[1]
        return x + gx, logdet


class ResidualFlow(nn.Module):
    def __init__(self, dim=2, hidden=32, num_blocks=4):
        super().__init__()
        self.blocks = nn.ModuleList([ResidualFlowBlock(dim, hidden) for _ in range(num_blocks)])

    def forward(self, x):
        total_logdet = torch.zeros(x.shape[0])
        for block in self.blocks:
            x, ld = block(x)
            total_logdet = total_logdet + ld
        return x, total_logdet


def nll(model, x):
    z, logdet = model(x)
    log_pz = -0.5 * (z ** 2).sum(1) - z.shape[1] * 0.5 * math.log(2 * math.pi)
    return -(log_pz + logdet).mean()


def evaluate(model, x):
    model.eval()
    with torch.enable_grad():
        val = nll(model, x.clone()).item()
    model.train()
    return val


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 123)
    val_x = sample_rings(gen, 128)

    model = ResidualFlow(2, args.hidden, args.blocks)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    sanity_check = args.bug == "spectral-eval-first"
    if sanity_check:
        print(f"initial val nll {evaluate(model, val_x):.4f}")

    model.train()
    for step in range(args.steps):
        x = sample_rings(gen, args.batch_size)
        loss = nll(model, x)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} nll {loss.item():.4f}")

    print(f"final val nll {evaluate(model, val_x):.4f}")


if __name__ == "__main__":
    main()
