"""Attention-based multiple-instance learning (bag classifier) trained under bf16 CPU autocast; the
attention pooling (softmax over instances) is always computed in float32 by design."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class AttentionPool(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.v = nn.Linear(dim, hidden)
        self.w = nn.Linear(hidden, 1)

    def forward(self, h, mask):
        with torch.autocast("cpu", enabled=False):
            h = h.float()
            scores = self.w(torch.tanh(self.v(h))).squeeze(-1).masked_fill(~mask, float("-inf"))
            return (scores.softmax(-1).unsqueeze(-1) * h).sum(1)


class MILNet(nn.Module):
    def __init__(self, in_dim, dim):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, dim), nn.GELU(), nn.Linear(dim, dim), nn.GELU())
        self.pool = AttentionPool(dim, dim // 2)
        self.classifier = nn.Linear(dim, 1)

    def forward(self, bags, mask):
        return self.classifier(self.pool(self.encoder(bags), mask)).squeeze(-1)


def make_bags(gen, n, max_inst, in_dim, witness):
    bags = torch.randn(n, max_inst, in_dim, generator=gen)
    sizes = torch.randint(3, max_inst + 1, (n,), generator=gen)
    mask = torch.arange(max_inst)[None] < sizes[:, None]
    labels = torch.randint(0, 2, (n,), generator=gen)
    bags[labels.bool(), 0] += witness
    return bags, mask, labels.float()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--dim", type=int, default=32)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    witness = torch.randn(10, generator=gen) * 2
    model = MILNet(10, args.dim)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        bags, mask, labels = make_bags(gen, args.batch_size, 8, 10, witness)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(bags, mask)
        loss = F.binary_cross_entropy_with_logits(logits.float(), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
