"""Gated MLP-mixer style token model trained under CPU bf16 autocast with Adamax and ExponentialLR."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class GatedBlock(nn.Module):
    def __init__(self, d, seq, fp32_gate=False):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.token_mix = nn.Linear(seq, seq)
        self.value = nn.Linear(d, 2 * d)
        self.gate = nn.Linear(d, 2 * d)
        self.out = nn.Linear(2 * d, d)
        self.fp32_gate = fp32_gate

    def _gate(self, h):
        if self.fp32_gate:
            # keep the sigmoid gate in full precision to avoid saturation
            with torch.autocast("cpu", enabled=False):
                return torch.sigmoid(self.gate(h.float()))
        return torch.sigmoid(self.gate(h))

    def forward(self, x):
        h = self.norm(x)
        h = h + self.token_mix(h.transpose(1, 2)).transpose(1, 2)
        return x + self.out(self.value(h) * self._gate(h))


class Mixer(nn.Module):
    def __init__(self, vocab, seq, d, depth, n_classes, fp32_gate):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([GatedBlock(d, seq, fp32_gate) for _ in range(depth)])
        self.head = nn.Linear(d, n_classes)

    def forward(self, tok):
        x = self.embed(tok)
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=12)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--gamma", type=float, default=0.95)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed * 3 + 1)
    vocab, n_classes = 50, 3
    model = Mixer(vocab, args.seq_len, args.dim, 2, n_classes, fp32_gate=(args.bug == "autocast-escape"))
    opt = torch.optim.Adamax(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=args.gamma)
    for step in range(args.steps):
        tok = torch.randint(0, vocab, (args.batch_size, args.seq_len), generator=gen)
        y = (tok[:, 0] % n_classes)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(tok)
            loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
