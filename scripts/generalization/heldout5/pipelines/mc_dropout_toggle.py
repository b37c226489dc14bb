"""Heteroscedastic dropout regressor with an auxiliary reconstruction loss, switching train/eval every step to log a held-out deterministic score."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class HeteroNet(nn.Module):
    def __init__(self, in_dim, hidden, p_drop):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(p_drop),
                                   nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(p_drop))
        self.mean = nn.Linear(hidden, 1)
        self.log_var = nn.Linear(hidden, 1)
        self.recon = nn.Linear(hidden, in_dim)

    def forward(self, x):
        h = self.trunk(x)
        return self.mean(h).squeeze(-1), self.log_var(h).squeeze(-1), self.recon(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--aux-weight", type=float, default=0.1)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = HeteroNet(8, 32, args.dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(args.seed)
    hold_x = torch.randn(32, 8, generator=g)
    hold_y = hold_x[:, 0] * 2 + hold_x[:, 1].abs()
    for step in range(args.steps):
        model.train()
        x = torch.randn(args.batch_size, 8, generator=g)
        y = x[:, 0] * 2 + x[:, 1].abs() + 0.1 * (1 + x[:, 2].abs()) * torch.randn(args.batch_size, generator=g)
        optimizer.zero_grad()
        mean, log_var, recon = model(x)
        nll = F.gaussian_nll_loss(mean, y, log_var.exp())
        loss = nll + args.aux_weight * F.mse_loss(recon, x)
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            hold_mse = F.mse_loss(model(hold_x)[0], hold_y).item()
        print(f"step {step} nll {nll.item():.4f} holdout_mse {hold_mse:.4f}")


if __name__ == "__main__":
    main()
