"""MLP-Mixer on synthetic 16x16 "texture" images, trained under CPU bf16 autocast.

The classification head's feed-forward is kept in float32 on purpose (precision policy applied by
``keep_fp32``); everything else runs in bfloat16. SGD with Nesterov momentum, warmup + cosine via
LambdaLR, epoch loop over a DataLoader.
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.force_fp32 = False

    def forward(self, x):
        if self.force_fp32:
            with torch.autocast("cpu", enabled=False):
                return self.fc2(F.gelu(self.fc1(x.float())))
        return self.fc2(F.gelu(self.fc1(x)))


class MixerBlock(nn.Module):
    def __init__(self, n_tokens, dim, tok_hidden, ch_hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mlp = FeedForward(n_tokens, tok_hidden)
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mlp = FeedForward(dim, ch_hidden)

    def forward(self, x):  # (B, N, C)
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class ClassifierHead(nn.Module):
    def __init__(self, dim, n_classes):
        super().__init__()
        self.ffn = FeedForward(dim, dim * 2)
        self.out = nn.Linear(dim, n_classes)

    def forward(self, x):
        return self.out(self.ffn(x).float())


class Mixer(nn.Module):
    def __init__(self, img=16, patch=4, dim=32, depth=2, n_classes=4):
        super().__init__()
        n_tok = (img // patch) ** 2
        self.patchify = nn.Conv2d(1, dim, patch, stride=patch)
        self.blocks = nn.Sequential(*[MixerBlock(n_tok, dim, 2 * n_tok, 2 * dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = ClassifierHead(dim, n_classes)

    def forward(self, x):
        h = self.patchify(x).flatten(2).transpose(1, 2)
        h = self.norm(self.blocks(h))
        return self.head(h.mean(1))


def keep_fp32(module: nn.Module):
    """Disable autocast for every FeedForward inside ``module``."""
    for m in module.modules():
        if isinstance(m, FeedForward):
            m.force_fp32 = True


def textures(gen, n, img=16, n_classes=4):
    yy, xx = torch.meshgrid(torch.arange(img), torch.arange(img), indexing="ij")
    labels = torch.randint(0, n_classes, (n,), generator=gen)
    angle = labels.float() * math.pi / n_classes + 0.2 * torch.randn(n, generator=gen)
    freq = 0.8 + 0.3 * torch.rand(n, generator=gen)
    phase = xx * angle.cos()[:, None, None] + yy * angle.sin()[:, None, None]
    x = torch.sin(freq[:, None, None] * phase) + 0.3 * torch.randn(n, img, img, generator=gen)
    return x.unsqueeze(1), labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bug", choices=["autocast-escape"], default=None)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    x, y = textures(gen, 384)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed))

    net = Mixer(dim=args.dim)
    # precision policy: the head's feed-forward stays fp32; the refactor passes the root module instead
    keep_fp32(net if args.bug == "autocast-escape" else net.head)

    optim = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    total = max(args.steps, 1)

    def lr_lambda(s):
        if s < args.warmup:
            return (s + 1) / args.warmup
        return 0.5 * (1 + math.cos(math.pi * (s - args.warmup) / max(1, total - args.warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(optim, lr_lambda)
    step, losses = 0, []
    net.train()
    while step < args.steps:
        for xb, yb in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = net(xb)
            loss = F.cross_entropy(logits.float(), yb)
            optim.zero_grad()
            loss.backward()
            optim.step()
            sched.step()
            losses.append(loss.item())
            acc = (logits.argmax(1) == yb).float().mean().item()
            print(f"step {step} loss {loss.item():.4f} acc {acc:.3f} lr {sched.get_last_lr()[0]:.4f}")
            step += 1
            if step == args.steps:
                break
    if args.save:
        torch.save({"state": net.state_dict(), "losses": losses}, args.save)


if __name__ == "__main__":
    main()
