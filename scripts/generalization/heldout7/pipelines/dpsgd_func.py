"""DP-SGD for a small residual regressor with per-example gradients from torch.func (vmap + grad).

Per-example gradients are clipped to ``--clip`` and Gaussian noise from a seeded generator is added;
the privatised gradient is written to ``.grad`` and applied with torch.optim.SGD (momentum).
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from torch.func import functional_call, grad, vmap


class ResRegressor(nn.Module):
    def __init__(self, d_in, width):
        super().__init__()
        self.inp = nn.Linear(d_in, width)
        self.res = nn.Linear(width, width)
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        h = h + torch.tanh(self.res(h))
        return self.out(h).squeeze(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--noise-multiplier", type=float, default=0.5)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    X = torch.randn(2048, 6, generator=gen)
    w_true = torch.randn(6, generator=gen)
    y = torch.tanh(X @ w_true) + 0.1 * torch.randn(2048, generator=gen)

    model = ResRegressor(6, args.width)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
    names = [n for n, _ in model.named_parameters()]

    def sample_loss(params, x, t):
        pred = functional_call(model, params, (x.unsqueeze(0),))
        return (pred - t.unsqueeze(0)).pow(2).mean()

    per_sample_grad = vmap(grad(sample_loss), in_dims=(None, 0, 0))
    noise_gen = torch.Generator().manual_seed(args.seed + 1)
    for step in range(args.steps):
        idx = torch.randint(0, X.shape[0], (args.batch_size,), generator=gen)
        params = {n: p.detach() for n, p in model.named_parameters()}
        grads = per_sample_grad(params, X[idx], y[idx])
        norms = torch.sqrt(sum(grads[n].flatten(1).pow(2).sum(1) for n in names))
        scale = (args.clip / (norms + 1e-6)).clamp(max=1.0)
        for n, p in model.named_parameters():
            g = (grads[n] * scale.view(-1, *([1] * (grads[n].dim() - 1)))).sum(0)
            g += args.noise_multiplier * args.clip * torch.randn(g.shape, generator=noise_gen)
            p.grad = g / args.batch_size
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            mse = (model(X[:256]) - y[:256]).pow(2).mean().item()
        print(f"step {step} train_mse {mse:.4f} clipped_frac {(norms > args.clip).float().mean():.2f}")


if __name__ == "__main__":
    main()
