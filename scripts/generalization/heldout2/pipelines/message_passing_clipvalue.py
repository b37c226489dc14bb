"""Trains a graph-free message-passing network (dense adjacency matrices, shared edge/node MLPs,
three rounds, sum readout) to predict a property of small random graphs; gradients are clipped
element-wise with clip_grad_value_ before each step.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class MessagePassingNet(nn.Module):
    def __init__(self, d_node: int = 4, hidden: int = 24, rounds: int = 3) -> None:
        super().__init__()
        self.rounds = rounds
        self.embed = nn.Linear(d_node, hidden)
        self.message = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.SiLU())
        self.update = nn.GRUCell(hidden, hidden)
        self.readout = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 1))

    def forward(self, feats: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        b, n, _ = feats.shape
        h = self.embed(feats)
        for _ in range(self.rounds):
            pair = torch.cat([h[:, :, None].expand(b, n, n, -1),
                              h[:, None, :].expand(b, n, n, -1)], dim=-1)
            msgs = (self.message(pair) * adj[..., None]).sum(2)
            h = self.update(msgs.reshape(b * n, -1), h.reshape(b * n, -1)).view(b, n, -1)
        return self.readout(h.sum(1)).squeeze(-1)


def random_graphs(b: int, n: int, gen: torch.Generator):
    upper = (torch.rand(b, n, n, generator=gen) < 0.3).float().triu(1)
    adj = upper + upper.transpose(1, 2)
    feats = torch.randn(b, n, 4, generator=gen)
    deg = adj.sum(-1)
    target = (deg * feats[..., 0]).sum(-1) / n + (adj @ adj * adj).sum((1, 2)) / (6 * n)
    return feats, adj, target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--clip-value", type=float, default=0.05)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = MessagePassingNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        feats, adj, target = random_graphs(args.batch_size, args.nodes, gen)
        loss = F.smooth_l1_loss(model(feats, adj), target)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_value_(model.parameters(), args.clip_value)
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
