"""RBF-network classifier regularised with an input-gradient penalty (double backprop).

A radial-basis-function layer (learnable centres and log-widths) feeds a
linear read-out, trained on a 2-D "two spirals" problem. The loss adds
lambda * ||d loss / d x||^2, computed with autograd.grad(create_graph=True),
to encourage a smooth, locally-Lipschitz decision function.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def two_spirals(gen, n):
    labels = torch.randint(0, 2, (n,), generator=gen)
    t = 0.5 + 2.5 * torch.rand(n, generator=gen)
    angle = t * math.pi + labels.float() * math.pi
    pts = torch.stack([t * angle.cos(), t * angle.sin()], 1) / 3.0
    return pts + 0.03 * torch.randn(n, 2, generator=gen), labels


class RBFLayer(nn.Module):
    def __init__(self, in_dim, n_centres):
        super().__init__()
        self.centres = nn.Parameter(torch.rand(n_centres, in_dim) * 2 - 1)
        self.log_gamma = nn.Parameter(torch.full((n_centres,), math.log(2.0)))

    def forward(self, x):
        d2 = torch.cdist(x, self.centres).pow(2)
        return torch.exp(-self.log_gamma.exp() * d2)


class RBFNet(nn.Module):
    def __init__(self, n_centres, n_classes=2):
        super().__init__()
        self.rbf = RBFLayer(2, n_centres)
        self.readout = nn.Linear(n_centres, n_classes)

    def forward(self, x):
        return self.readout(self.rbf(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--centres", type=int, default=24)
    ap.add_argument("--gp-weight", type=float, default=0.1)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 4)
    model = RBFNet(args.centres)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    for step in range(args.steps):
        x, y = two_spirals(gen, args.batch_size)
        x.requires_grad_(True)
        ce = F.cross_entropy(model(x), y)
        (grad_x,) = torch.autograd.grad(ce, x, create_graph=True)
        penalty = grad_x.pow(2).sum(1).mean() * x.shape[0]  # per-example gradient scale
        loss = ce + args.gp_weight * penalty
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} ce {ce.item():.4f} grad-penalty {penalty.item():.4f}")


if __name__ == "__main__":
    main()
