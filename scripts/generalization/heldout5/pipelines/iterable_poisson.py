"""Poisson count regression (log-link neural GLM) streamed from an IterableDataset through a DataLoader, optimised with RMSprop."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset


class CountStream(IterableDataset):
    def __init__(self, n_features, seed):
        super().__init__()
        self.n_features, self.seed = n_features, seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        w = torch.randn(self.n_features, generator=g) * 0.4
        while True:
            x = torch.randn(self.n_features, generator=g)
            rate = torch.exp(0.5 + x @ w)
            yield x, torch.poisson(rate.unsqueeze(0), generator=g).squeeze(0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--hidden", type=int, default=16)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(6, args.hidden), nn.Softplus(), nn.Linear(args.hidden, 1))
    optimizer = torch.optim.RMSprop(model.parameters(), lr=args.lr, alpha=0.9)
    loader = DataLoader(CountStream(6, args.seed), batch_size=args.batch_size, num_workers=0)
    for step, (x, counts) in enumerate(loader):
        if step >= args.steps:
            break
        optimizer.zero_grad()
        log_rate = model(x).squeeze(-1)
        loss = F.poisson_nll_loss(log_rate, counts, log_input=True)
        loss.backward()
        optimizer.step()
        print(f"step {step} poisson_nll {loss.item():.4f}")


if __name__ == "__main__":
    main()
