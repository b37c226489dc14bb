"""Hypernetwork for few-shot regression, validated every step (train/eval toggling).

A task encoder summarises a task's support set (x, y pairs from a random
cubic polynomial) into an embedding; a hypernetwork maps that embedding to the
full weight vector of a small target network that is evaluated functionally
on the query points. The hypernetwork contains BatchNorm and Dropout, and
after every training step the model is switched to eval() for a validation
batch and back to train() for the next step.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def sample_tasks(gen, n_tasks, n_support, n_query):
    coeffs = torch.randn(n_tasks, 4, generator=gen) * torch.tensor([1.0, 1.0, 0.5, 0.3])
    xs = torch.rand(n_tasks, n_support + n_query, 1, generator=gen) * 4 - 2
    powers = torch.cat([xs ** k for k in range(4)], -1)
    ys = (powers * coeffs[:, None, :]).sum(-1, keepdim=True)
    ys = ys + 0.05 * torch.randn(ys.shape, generator=gen)
    return xs[:, :n_support], ys[:, :n_support], xs[:, n_support:], ys[:, n_support:]


class HyperRegressor(nn.Module):
    def __init__(self, emb_dim, target_hidden, dropout=0.1):
        super().__init__()
        self.th = target_hidden
        self.n_target = (1 * target_hidden + target_hidden) + (target_hidden * 1 + 1)
        self.task_encoder = nn.Sequential(nn.Linear(2, emb_dim), nn.ReLU(), nn.Linear(emb_dim, emb_dim))
        self.hyper = nn.Sequential(nn.Linear(emb_dim, 2 * emb_dim), nn.BatchNorm1d(2 * emb_dim), nn.ReLU(),
                                   nn.Dropout(dropout), nn.Linear(2 * emb_dim, self.n_target))
        with torch.no_grad():
            self.hyper[-1].weight.mul_(0.1)

    def forward(self, sx, sy, qx):
        task_emb = self.task_encoder(torch.cat([sx, sy], -1)).mean(1)   # (T, E) deep-sets pooling
        w = self.hyper(task_emb)                                          # (T, n_target)
        th = self.th
        w1, b1, w2, b2 = torch.split(w, [th, th, th, 1], dim=-1)
        h = torch.tanh(qx * w1[:, None, :] + b1[:, None, :])                # (T, Q, th)
        return (h * w2[:, None, :]).sum(-1, keepdim=True) + b2[:, None, :]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=8, help="tasks per batch")
    ap.add_argument("--emb-dim", type=int, default=32)
    ap.add_argument("--target-hidden", type=int, default=16)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 19)
    val_gen = torch.Generator().manual_seed(4242)
    model = HyperRegressor(args.emb_dim, args.target_hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    for step in range(args.steps):
        model.train()
        sx, sy, qx, qy = sample_tasks(gen, args.batch_size, 10, 10)
        loss = F.mse_loss(model(sx, sy, qx), qy)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        model.eval()
        with torch.no_grad():
            vsx, vsy, vqx, vqy = sample_tasks(val_gen, 8, 10, 10)
            val = F.mse_loss(model(vsx, vsy, vqx), vqy).item()
        print(f"step {step} train {loss.item():.4f} val {val:.4f}")
    model.train()


if __name__ == "__main__":
    main()
