"""Trains a small top-1 mixture-of-experts regressor (softmax router + 4 expert MLPs + a
load-balancing auxiliary loss); with small batches some experts receive no tokens on some steps,
so their parameters get no gradient on those steps.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Expert(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


class Top1MoE(nn.Module):
    def __init__(self, dim: int = 8, hidden: int = 16, n_experts: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(dim, n_experts, bias=False)
        self.experts = nn.ModuleList(Expert(dim, hidden) for _ in range(n_experts))
        self.head = nn.Linear(dim, 1)
        self.last_counts = torch.zeros(n_experts, dtype=torch.long)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = self.router(x).softmax(-1)
        gate, choice = probs.max(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            sel = (choice == e).nonzero(as_tuple=True)[0]
            if sel.numel() == 0:
                continue
            out[sel] = gate[sel, None] * expert(x[sel])
        n_experts = len(self.experts)
        counts = torch.bincount(choice, minlength=n_experts)
        self.last_counts = counts
        frac = counts.float() / x.shape[0]
        balance = n_experts * (frac * probs.mean(0)).sum()
        return self.head(x + out).squeeze(-1), balance


def make_batch(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 8, generator=gen)
    region = (x[:, 0] > 0).long() * 2 + (x[:, 1] > 0).long()
    y = torch.where(region % 2 == 0, x[:, 2].abs(), torch.sin(3 * x[:, 3])) + 0.5 * region
    return x, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--balance-coef", type=float, default=0.01)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = Top1MoE()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        x, y = make_batch(args.batch_size, gen)
        pred, balance = model(x)
        loss = F.mse_loss(pred, y) + args.balance_coef * balance
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f} tokens/expert {model.last_counts.tolist()}")

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
