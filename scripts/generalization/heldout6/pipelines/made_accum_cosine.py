"""Autoregressive MADE density model on binary patterns; gradient accumulation with warmup+cosine LR."""
import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn


class MaskedLinear(nn.Linear):
    def __init__(self, in_f, out_f, mask):
        super().__init__(in_f, out_f)
        self.register_buffer("mask", mask)

    def forward(self, x):
        return F.linear(x, self.weight * self.mask, self.bias)


class MADE(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        deg_in = torch.arange(1, d + 1)
        deg_h = torch.arange(hidden) % (d - 1) + 1
        self.l1 = MaskedLinear(d, hidden, (deg_h[:, None] >= deg_in[None]).float())
        self.l2 = MaskedLinear(hidden, hidden, (deg_h[:, None] >= deg_h[None]).float())
        self.out = MaskedLinear(hidden, d, (deg_in[:, None] > deg_h[None]).float())

    def forward(self, x):
        return self.out(F.relu(self.l2(F.relu(self.l1(x)))))


def warmup_cosine(warmup, total):
    def fn(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))
    return fn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--accum", type=int, default=2)
    p.add_argument("--hidden", type=int, default=32)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    d = 10
    protos = (torch.rand(4, d, generator=gen) < 0.5).float()
    model = MADE(d, args.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(2, args.steps))
    for step in range(args.steps):
        total = 0.0
        for _ in range(args.accum):
            idx = torch.randint(0, 4, (args.batch_size,), generator=gen)
            flip = (torch.rand(args.batch_size, d, generator=gen) < 0.1).float()
            x = (protos[idx] + flip) % 2
            loss = F.binary_cross_entropy_with_logits(model(x), x, reduction="sum") / x.shape[0]
            (loss / args.accum).backward()
            total += loss.item() / args.accum
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        print(f"step {step} nll {total:.3f} lr {sched.get_last_lr()[0]:.5f}")


if __name__ == "__main__":
    main()
