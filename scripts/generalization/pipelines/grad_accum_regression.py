"""Trains an MLP regressor (SiLU, heteroscedastic Gaussian NLL head) with gradient accumulation: each optimizer
step sums the gradients of --accum micro-batches (loss scaled by 1/accum) drawn from a DataLoader, then
takes one SGD-with-momentum step."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class GaussianRegressor(nn.Module):
    def __init__(self, d_in, hidden):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(d_in, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU())
        self.mean = nn.Linear(hidden, 1)
        self.log_var = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.mean(h).squeeze(-1), self.log_var(h).squeeze(-1).clamp(-6, 6)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8, help="optimizer steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--micro-batch-size", type=int, default=8)
    p.add_argument("--accum", type=int, default=4)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.rand(600, 3, generator=gen) * 4 - 2
    noise_scale = 0.1 + 0.3 * x[:, 0].abs()
    y = x[:, 0] ** 2 - x[:, 1] + 0.5 * x[:, 2] + noise_scale * torch.randn(600, generator=gen)

    loader = DataLoader(TensorDataset(x, y), batch_size=args.micro_batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(args.seed))
    model = GaussianRegressor(3, 32)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    micro_batches = iter(loader)
    model.train()
    for _step in range(args.steps):
        optimizer.zero_grad()
        step_loss = 0.0
        for _ in range(args.accum):
            try:
                xb, yb = next(micro_batches)
            except StopIteration:
                micro_batches = iter(loader)
                xb, yb = next(micro_batches)
            mean, log_var = model(xb)
            loss = F.gaussian_nll_loss(mean, yb, log_var.exp())
            (loss / args.accum).backward()
            step_loss += loss.item() / args.accum
        optimizer.step()

    print(f"final loss {step_loss:.6f}")


if __name__ == "__main__":
    main()
