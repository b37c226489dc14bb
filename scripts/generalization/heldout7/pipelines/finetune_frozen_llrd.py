"""Two-stage run of a 1-D conv encoder: short self-supervised pretext stage, then partial fine-tuning.

Stage 1 (``--pretrain-steps``) trains the whole encoder to predict a masked segment. Stage 2 freezes
the stem and first conv stage (requires_grad=False, their BatchNorms kept in eval so running stats stop),
and fine-tunes the rest for classification with layer-wise LR decay, no weight decay on biases/norms,
cosine decay to a floor that then stays flat, and a loose clip_grad_norm_ that seldom triggers.
``--steps`` counts fine-tuning optimizer updates (stage 2 only).
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def conv_bn(cin, cout, stride):
    return nn.Sequential(nn.Conv1d(cin, cout, 5, stride, 2, bias=False), nn.BatchNorm1d(cout), nn.ReLU())


class Encoder(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.stem = conv_bn(1, w, 1)
        self.stage1 = conv_bn(w, w, 2)
        self.stage2 = conv_bn(w, 2 * w, 2)
        self.stage3 = conv_bn(2 * w, 2 * w, 2)

    def forward(self, x):
        return self.stage3(self.stage2(self.stage1(self.stem(x))))


def signals(gen, n, length=64):
    y = torch.randint(0, 3, (n,), generator=gen)
    t = torch.linspace(0, 1, length)
    f = (2 + 3 * y).float().unsqueeze(1) + 0.3 * torch.randn(n, 1, generator=gen)
    return (torch.sin(2 * math.pi * f * t) + 0.2 * torch.randn(n, length, generator=gen)).unsqueeze(1), y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--pretrain-steps", type=int, default=3)
    ap.add_argument("--layer-decay", type=float, default=0.5)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    X, Y = signals(gen, 512)
    enc = Encoder(args.width)
    recon_head = nn.Linear(2 * args.width * 8, 16)

    # ---- stage 1: pretext (predict the masked first 16 samples) ----
    pre_opt = torch.optim.Adam(list(enc.parameters()) + list(recon_head.parameters()), lr=args.lr)
    for s in range(args.pretrain_steps):
        idx = torch.randint(0, len(X), (args.batch_size,), generator=gen)
        xb = X[idx].clone()
        target = xb[:, 0, :16].clone()
        xb[:, :, :16] = 0
        loss = F.mse_loss(recon_head(enc(xb).flatten(1)), target)
        pre_opt.zero_grad()
        loss.backward()
        pre_opt.step()
        print(f"pretext {s} loss {loss.item():.4f}")

    # ---- stage 2: freeze the bottom, fine-tune the top ----
    frozen = [enc.stem, enc.stage1]
    for m in frozen:
        m.requires_grad_(False)
    classifier = nn.Linear(2 * args.width, 3)
    stages = [("stage2", enc.stage2, 1), ("stage3", enc.stage3, 0), ("classifier", classifier, 0)]
    groups = []
    for _, mod, depth_from_top in stages:
        scale = args.layer_decay**depth_from_top
        decay = [p for n, p in mod.named_parameters() if p.ndim > 1]
        no_decay = [p for n, p in mod.named_parameters() if p.ndim <= 1]
        groups += [{"params": decay, "lr": args.lr * scale, "weight_decay": 0.01},
                   {"params": no_decay, "lr": args.lr * scale, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups)
    cos_len = max(1, int(0.6 * args.steps))

    def lr_factor(step):
        if step >= cos_len:
            return args.min_lr_ratio
        return args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * step / cos_len))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    trainable = [p for g in groups for p in g["params"]]
    for step in range(args.steps):
        enc.train()
        for m in frozen:
            m.eval()
        idx = torch.randint(0, len(X), (args.batch_size,), generator=gen)
        logits = classifier(enc(X[idx]).mean(-1))
        loss = F.cross_entropy(logits, Y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(trainable, max_norm=50.0)
        opt.step()
        sched.step()
        acc = (logits.argmax(1) == Y[idx]).float().mean().item()
        print(f"finetune {step} loss {loss.item():.4f} acc {acc:.2f} gnorm {norm.item():.2f} "
              f"lr {sched.get_last_lr()[-1]:.2e}")


if __name__ == "__main__":
    main()
