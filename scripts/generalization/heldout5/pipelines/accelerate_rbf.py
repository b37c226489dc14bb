"""Radial-basis-function network regression trained with Hugging Face Accelerate (single CPU process) and Adagrad."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


class RBFNet(nn.Module):
    def __init__(self, in_dim, n_centers):
        super().__init__()
        self.centers = nn.Parameter(torch.randn(n_centers, in_dim))
        self.log_gamma = nn.Parameter(torch.zeros(n_centers))
        self.out = nn.Linear(n_centers, 1)

    def forward(self, x):
        d2 = torch.cdist(x, self.centers).pow(2)
        return self.out(torch.exp(-self.log_gamma.exp() * d2)).squeeze(-1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--centers", type=int, default=16)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    accelerator = Accelerator(cpu=True)
    g = torch.Generator().manual_seed(args.seed)
    x = torch.rand(args.steps * args.batch_size, 2, generator=g) * 4 - 2
    y = torch.sin(x[:, 0]) * torch.exp(-x[:, 1].pow(2))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=False)
    model = RBFNet(2, args.centers)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=args.lr)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for step, (xb, yb) in enumerate(loader):
        if step >= args.steps:
            break
        optimizer.zero_grad()
        loss = F.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        optimizer.step()
        accelerator.print(f"step {step} mse {loss.item():.4f}")


if __name__ == "__main__":
    main()
