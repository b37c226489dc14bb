"""DP-SGD by hand: per-sample gradients via torch.func (functional_call + vmap(grad)), per-sample clipping,
Gaussian noise, and a manual SGD-with-momentum update (no torch.optim)."""
import argparse

import torch
import torch.nn as nn
from torch.func import functional_call, grad, vmap


class SmallNet(nn.Module):
    def __init__(self, d, h, c):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(h, c)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--noise", type=float, default=0.5)
    ap.add_argument("--momentum", type=float, default=0.9)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 17)
    d, c = 10, 3
    w_true = torch.randn(d, c, generator=g)
    model = SmallNet(d, 24, c)
    params = {k: v.detach() for k, v in model.named_parameters()}
    velocity = {k: torch.zeros_like(v) for k, v in params.items()}

    def loss_fn(p, x, y):
        out = functional_call(model, p, (x.unsqueeze(0),))
        return nn.functional.cross_entropy(out, y.unsqueeze(0))

    per_sample_grads = vmap(grad(loss_fn), in_dims=(None, 0, 0))
    for step in range(args.steps):
        x = torch.randn(args.batch_size, d, generator=g)
        y = (x @ w_true).argmax(1)
        grads = per_sample_grads(params, x, y)
        norms = torch.sqrt(sum(gr.flatten(1).pow(2).sum(1) for gr in grads.values()))
        factor = (args.clip / (norms + 1e-6)).clamp(max=1.0)
        with torch.no_grad():
            for k in params:
                gsum = (grads[k] * factor.view(-1, *[1] * (grads[k].dim() - 1))).sum(0)
                noisy = (gsum + args.noise * args.clip * torch.randn(gsum.shape, generator=g)) / args.batch_size
                velocity[k].mul_(args.momentum).add_(noisy)
                params[k] = params[k] - args.lr * velocity[k]
        with torch.no_grad():
            loss = nn.functional.cross_entropy(functional_call(model, params, (x,)), y)
        print(f"step {step} loss {loss.item():.4f} mean_sample_norm {norms.mean().item():.3f}")
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.copy_(params[k])


if __name__ == "__main__":
    main()
