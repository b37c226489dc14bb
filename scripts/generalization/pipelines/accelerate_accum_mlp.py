"""Single-process HuggingFace Accelerate loop (Accelerator(cpu=True)) training an MLP classifier with a
prepared DataLoader, optimizer and CosineAnnealingLR scheduler, using accelerator.accumulate() for gradient
accumulation over --accum micro-batches and accelerator.backward()."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset


class MoonsNet(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.cls = nn.Linear(hidden, 2)

    def forward(self, x):
        return self.cls(self.body(x))


def make_moons(gen, n, noise=0.15):
    half = n // 2
    t1 = torch.rand(half, generator=gen) * torch.pi
    t2 = torch.rand(n - half, generator=gen) * torch.pi
    upper = torch.stack([torch.cos(t1), torch.sin(t1)], 1)
    lower = torch.stack([1 - torch.cos(t2), 0.5 - torch.sin(t2)], 1)
    x = torch.cat([upper, lower]) + noise * torch.randn(n, 2, generator=gen)
    y = torch.cat([torch.zeros(half, dtype=torch.long), torch.ones(n - half, dtype=torch.long)])
    return x, y


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8, help="optimizer steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--batch-size", type=int, default=16, help="micro-batch size")
    p.add_argument("--accum", type=int, default=2)
    args = p.parse_args()

    set_seed(args.seed)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=args.accum)
    x, y = make_moons(torch.Generator().manual_seed(args.seed), 400)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(args.seed))

    model = MoonsNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    model.train()
    opt_steps = 0
    loss = torch.tensor(float("nan"))
    while opt_steps < args.steps:
        for xb, yb in loader:
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(xb), yb)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                opt_steps += 1
                if opt_steps >= args.steps:
                    break

    accelerator.print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
