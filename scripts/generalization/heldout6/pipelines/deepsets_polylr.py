"""DeepSets regressor predicting the range (max - min) of a set of scalars; PolynomialLR and
separate weight-decay parameter groups."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class DeepSets(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.rho = nn.Sequential(nn.ReLU(), nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x, mask):
        h = self.phi(x.unsqueeze(-1))
        h_sum = (h * mask.unsqueeze(-1)).sum(1)
        h_max = h.masked_fill(~mask.unsqueeze(-1), -1e4).amax(1)
        return self.rho(torch.cat([h_sum, h_max], -1)).squeeze(-1)


def param_groups(model, wd):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if name.endswith("bias") else decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=4e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--hidden", type=int, default=24)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    model = DeepSets(args.hidden)
    opt = torch.optim.AdamW(param_groups(model, 0.05), lr=args.lr)
    sched = torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=args.steps, power=2.0)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 10, generator=gen)
        lengths = torch.randint(2, 11, (args.batch_size,), generator=gen)
        mask = torch.arange(10)[None] < lengths[:, None]
        target = x.masked_fill(~mask, -1e4).amax(1) - x.masked_fill(~mask, 1e4).amin(1)
        loss = F.smooth_l1_loss(model(x, mask), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
