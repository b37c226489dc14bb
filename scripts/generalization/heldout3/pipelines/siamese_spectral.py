"""Siamese embedding network with a contrastive (margin) loss on synthetic pairs.

The encoder is Lipschitz-bounded with torch.nn.utils.spectral_norm. --bug spectral-eval-first.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import spectral_norm


class SNEncoder(nn.Module):
    def __init__(self, in_dim: int = 20, hidden: int = 32, emb: int = 8):
        super().__init__()
        self.fc1 = spectral_norm(nn.Linear(in_dim, hidden))
        self.fc2 = spectral_norm(nn.Linear(hidden, hidden))
        self.proj = nn.Linear(hidden, emb)

    def forward(self, x):
        h = F.leaky_relu(self.fc1(x), 0.1)
        h = F.leaky_relu(self.fc2(h), 0.1)
        return self.proj(h)


class Siamese(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = SNEncoder()

    def forward(self, a, b):
        return self.encoder(a), self.encoder(b)


def contrastive_loss(za, zb, same, margin=1.0):
    d = F.pairwise_distance(za, zb)
    return (same * d.pow(2) + (1 - same) * F.relu(margin - d).pow(2)).mean()


def make_pairs(gen, protos, n):
    k = protos.shape[0]
    ia = torch.randint(0, k, (n,), generator=gen)
    same = (torch.rand(n, generator=gen) < 0.5).float()
    ib = torch.where(same.bool(), ia, (ia + torch.randint(1, k, (n,), generator=gen)) % k)
    a = protos[ia] + 0.3 * torch.randn(n, protos.shape[1], generator=gen)
    b = protos[ib] + 0.3 * torch.randn(n, protos.shape[1], generator=gen)
    return a, b, same


@torch.no_grad()
def evaluate(model, batch):
    model.eval()
    a, b, same = batch
    loss = contrastive_loss(*model(a, b), same).item()
    model.train()
    return loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--eval-every", type=int, default=4)
    ap.add_argument("--bug", default="none", choices=["none", "spectral-eval-first"])
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    protos = torch.randn(6, 20, generator=gen)
    val = make_pairs(gen, protos, 64)
    model = Siamese()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    if args.bug != "spectral-eval-first":
        # Prime the power iteration with a train-mode pass before any eval-mode use.
        with torch.no_grad():
            model(val[0][:8], val[1][:8])
    print(f"baseline val loss {evaluate(model, val):.5f}")

    loss = torch.tensor(0.0)
    for step in range(args.steps):
        if step > 0 and step % args.eval_every == 0:
            print(f"step {step} val loss {evaluate(model, val):.5f}")
        a, b, same = make_pairs(gen, protos, args.batch_size)
        loss = contrastive_loss(*model(a, b), same)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.5f} val {evaluate(model, val):.5f}")


if __name__ == "__main__":
    main()
