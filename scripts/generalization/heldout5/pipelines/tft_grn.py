"""Temporal-fusion-style forecaster (variable selection + gated residual networks + attention over history) on synthetic multivariate series."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class GatedResidualNetwork(nn.Module):
    def __init__(self, d_in, d_hidden, d_out, dropout):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)
        self.gate = nn.Linear(d_out, 2 * d_out)
        self.drop = nn.Dropout(dropout)
        self.skip = nn.Linear(d_in, d_out) if d_in != d_out else nn.Identity()
        self.norm = nn.LayerNorm(d_out)

    def forward(self, x):
        h = self.drop(self.fc2(F.elu(self.fc1(x))))
        return self.norm(self.skip(x) + F.glu(self.gate(h), dim=-1))


class TemporalFusionLite(nn.Module):
    def __init__(self, n_vars, d_model, horizon, dropout):
        super().__init__()
        self.var_proj = nn.Linear(1, d_model)
        self.selector = GatedResidualNetwork(n_vars * d_model, d_model, n_vars, dropout)
        self.encoder_grn = GatedResidualNetwork(d_model, d_model, d_model, dropout)
        self.attn = nn.MultiheadAttention(d_model, 2, dropout=dropout, batch_first=True)
        self.post_grn = GatedResidualNetwork(d_model, d_model, d_model, dropout)
        self.head = nn.Linear(d_model, horizon)

    def forward(self, x):
        b, t, v = x.shape
        emb = self.var_proj(x.unsqueeze(-1))
        weights = self.selector(emb.reshape(b, t, -1)).softmax(dim=-1)
        h = self.encoder_grn((weights.unsqueeze(-1) * emb).sum(dim=2))
        a, _ = self.attn(h, h, h, need_weights=False)
        return self.head(self.post_grn(h + a)[:, -1])


def make_series(n, t, v, horizon, g):
    base = torch.cumsum(torch.randn(n, t + horizon, generator=g) * 0.3, dim=1)
    x = torch.stack([base[:, :t] + 0.1 * i * torch.randn(n, t, generator=g) for i in range(v)], dim=-1)
    return x, base[:, t:]


def evaluate(model, x, y, restore_train=True):
    was_training = model.training
    model.eval()
    with torch.no_grad():
        mse = F.mse_loss(model(x), y).item()
    if restore_train and was_training:
        model.train()
    return mse


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--eval-every", type=int, default=3)
    p.add_argument("--bug", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    n_vars, horizon = 3, 4
    model = TemporalFusionLite(n_vars, d_model=16, horizon=horizon, dropout=args.dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(args.seed)
    val_x, val_y = make_series(32, 12, n_vars, horizon, g)
    model.train()
    for step in range(args.steps):
        x, y = make_series(args.batch_size, 12, n_vars, horizon, g)
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        msg = f"step {step} mse {loss.item():.4f}"
        if (step + 1) % args.eval_every == 0:
            val = evaluate(model, val_x, val_y, restore_train=args.bug != "dropout-in-eval")
            msg += f" val_mse {val:.4f}"
        print(msg)
    return model


if __name__ == "__main__":
    main()
