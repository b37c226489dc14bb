"""Progressive-width regression MLP: trains a narrow net, then mid-run re-creates a wider net (function-preserving
widening, Net2Net-style), rebuilding the optimizer. Input normaliser keeps running stats in buffers updated in forward."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class RunningNorm(nn.Module):
    def __init__(self, d, momentum=0.1):
        super().__init__()
        self.register_buffer("mean", torch.zeros(d))
        self.register_buffer("var", torch.ones(d))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.momentum = momentum

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.mean.lerp_(x.mean(0), self.momentum)
                self.var.lerp_(x.var(0, unbiased=False), self.momentum)
                self.count += 1
        return (x - self.mean) / (self.var + 1e-5).sqrt()


class Regressor(nn.Module):
    def __init__(self, d, width):
        super().__init__()
        self.norm = RunningNorm(d)
        self.hidden = nn.Linear(d, width)
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        return self.out(F.relu(self.hidden(self.norm(x)))).squeeze(-1)


@torch.no_grad()
def widen(old, new_width, g):
    d, w = old.hidden.in_features, old.hidden.out_features
    new = Regressor(d, new_width)
    new.norm.load_state_dict(old.norm.state_dict())
    idx = torch.cat([torch.arange(w), torch.randint(0, w, (new_width - w,), generator=g)])
    counts = torch.bincount(idx, minlength=w).float()
    new.hidden.weight.copy_(old.hidden.weight[idx])
    new.hidden.bias.copy_(old.hidden.bias[idx])
    new.out.weight.copy_(old.out.weight[:, idx] / counts[idx])
    new.out.bias.copy_(old.out.bias)
    return new


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--grow-at", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 2)
    d = 5
    coef = torch.randn(d, generator=g)
    model = Regressor(d, args.width)
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        if step == args.grow_at:
            model = widen(model, 2 * args.width, g)
            opt = torch.optim.Adagrad(model.parameters(), lr=args.lr)
            print(f"grew to width {model.hidden.out_features}")
        model.train()
        x = 3 + 2 * torch.randn(args.batch_size, d, generator=g)
        y = torch.sin(x @ coef / 4) + 0.05 * torch.randn(args.batch_size, generator=g)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f} norm_updates {int(model.norm.count)}")


if __name__ == "__main__":
    main()
