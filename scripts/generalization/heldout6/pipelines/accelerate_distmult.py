"""DistMult knowledge-graph embedding trained with negative sampling through HF Accelerate (CPU, single process)
and Adagrad."""
import argparse

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class DistMult(nn.Module):
    def __init__(self, n_ent, n_rel, dim):
        super().__init__()
        self.ent = nn.Embedding(n_ent, dim)
        self.rel = nn.Embedding(n_rel, dim)
        nn.init.xavier_uniform_(self.ent.weight)
        nn.init.xavier_uniform_(self.rel.weight)

    def forward(self, h, r, t):
        return (self.ent(h) * self.rel(r) * self.ent(t)).sum(-1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--dim", type=int, default=16)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    n_ent, n_rel = 30, 4
    h = torch.randint(0, n_ent, (256,), generator=gen)
    r = torch.randint(0, n_rel, (256,), generator=gen)
    t = (h * (r + 2) + 1) % n_ent
    accelerator = Accelerator(cpu=True)
    model = DistMult(n_ent, n_rel, args.dim)
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr)
    loader = DataLoader(TensorDataset(h, r, t), batch_size=args.batch_size, shuffle=True, generator=gen)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    step = 0
    while step < args.steps:
        for bh, br, bt in loader:
            if step >= args.steps:
                break
            neg = torch.randint(0, n_ent, bt.shape, generator=gen)
            pos_score, neg_score = model(bh, br, bt), model(bh, br, neg)
            loss = F.softplus(-pos_score).mean() + F.softplus(neg_score).mean()
            opt.zero_grad()
            accelerator.backward(loss)
            opt.step()
            accelerator.print(f"step {step} loss {loss.item():.4f}")
            step += 1


if __name__ == "__main__":
    main()
