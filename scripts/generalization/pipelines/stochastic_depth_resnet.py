"""Trains a residual MLP with stochastic depth (Huang et al.): during training each residual block is skipped
entirely with probability growing with depth, so its parameters get no gradient on that step (grads are
set to None and Adam skips them); at eval time every block runs, scaled by its survival probability."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class StochasticBlock(nn.Module):
    def __init__(self, dim, survival_prob):
        super().__init__()
        self.survival_prob = survival_prob
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)

    def residual(self, x):
        return self.fc2(F.gelu(self.fc1(self.norm(x))))

    def forward(self, x):
        if self.training:
            if torch.rand(()) >= self.survival_prob:
                return x  # whole block dropped for this batch
            return x + self.residual(x)
        return x + self.survival_prob * self.residual(x)


class StochasticDepthNet(nn.Module):
    def __init__(self, d_in, dim, depth, n_classes, final_survival=0.5):
        super().__init__()
        self.stem = nn.Linear(d_in, dim)
        probs = [1.0 - (i + 1) / depth * (1.0 - final_survival) for i in range(depth)]
        self.blocks = nn.ModuleList([StochasticBlock(dim, p) for p in probs])
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x):
        h = self.stem(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def make_spirals(gen, n, n_classes=3):
    labels = torch.randint(0, n_classes, (n,), generator=gen)
    r = torch.rand(n, generator=gen) * 3 + 0.2
    theta = r * 1.8 + labels.float() * (2 * torch.pi / n_classes) + 0.2 * torch.randn(n, generator=gen)
    pts = torch.stack([r * torch.cos(theta), r * torch.sin(theta)], dim=1)
    feats = torch.cat([pts, pts ** 2, pts[:, :1] * pts[:, 1:]], dim=1)
    return feats, labels


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--depth", type=int, default=4)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    x, y = make_spirals(torch.Generator().manual_seed(args.seed), 400)
    loader = DataLoader(TensorDataset(x[:320], y[:320]), batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed))

    model = StochasticDepthNet(5, 32, args.depth, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    step = 0
    loss = torch.tensor(float("nan"))
    model.train()
    while step < args.steps:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step >= args.steps:
                break

    model.eval()
    with torch.no_grad():
        val_loss = F.cross_entropy(model(x[320:]), y[320:]).item()
    print(f"val loss {val_loss:.4f}")
    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
