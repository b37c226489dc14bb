"""Linear-softmax + hidden-layer model for synthetic multinomial logistic regression; the loop
clears gradients in place with optimizer.zero_grad(set_to_none=False). SGD with weight decay.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--wd", type=float, default=1e-3)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    w_true = torch.randn(10, 4, generator=gen)
    model = nn.Sequential(nn.Linear(10, 20), nn.ELU(), nn.Dropout(0.1), nn.Linear(20, 4))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, weight_decay=args.wd)

    model.train()
    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        x = torch.randn(48, 10, generator=gen)
        y = torch.argmax(x @ w_true + 0.2 * torch.randn(48, 4, generator=gen), dim=1)
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
