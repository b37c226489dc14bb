"""Keyword-spotting model: 1-D conv front-end + self-attention + attentive pooling.

Synthetic "MFCC" clips (n_mels x frames) where each keyword class has its own
spectro-temporal template buried in noise. Strided 1-D conv blocks with
GroupNorm downsample in time, one multi-head self-attention layer mixes context, and an
attentive statistics-pooling layer produces a clip embedding for the
classifier. Training runs under CPU bfloat16 autocast.
"""
import argparse
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class KWSConfig:
    n_mels: int = 20
    channels: int = 32
    n_classes: int = 5
    n_heads: int = 4
    pool_in_fp32: bool = False  # keep the pooling softmax / statistics in full precision


class ConvBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel_size=5, stride=stride, padding=2)
        self.norm = nn.GroupNorm(4, cout)

    def forward(self, x):
        return F.silu(self.norm(self.conv(x)))


class AttentiveStatsPool(nn.Module):
    def __init__(self, channels, fp32=False):
        super().__init__()
        self.fp32 = fp32
        self.score = nn.Sequential(nn.Linear(channels, channels // 2), nn.Tanh(), nn.Linear(channels // 2, 1))
        self.proj = nn.Linear(2 * channels, channels)

    def _pool(self, h):
        w = self.score(h).softmax(dim=1)
        mean = (w * h).sum(1)
        var = (w * (h - mean.unsqueeze(1)) ** 2).sum(1)
        return self.proj(torch.cat([mean, var.clamp(min=1e-5).sqrt()], dim=-1))

    def forward(self, h):
        if self.fp32:
            with torch.autocast("cpu", enabled=False):
                return self._pool(h.float())
        return self._pool(h)


class KeywordSpotter(nn.Module):
    def __init__(self, cfg: KWSConfig):
        super().__init__()
        c = cfg.channels
        self.stem = nn.Conv1d(cfg.n_mels, c, kernel_size=3, padding=1)
        self.blocks = nn.Sequential(ConvBlock(c, c, 2), ConvBlock(c, c, 2))
        self.attn = nn.MultiheadAttention(c, cfg.n_heads, batch_first=True)
        self.attn_norm = nn.LayerNorm(c)
        self.pool = AttentiveStatsPool(c, fp32=cfg.pool_in_fp32)
        self.classifier = nn.Linear(c, cfg.n_classes)

    def forward(self, feats):
        h = self.blocks(F.silu(self.stem(feats))).transpose(1, 2)  # (B, T', C)
        a, _ = self.attn(h, h, h, need_weights=False)
        h = self.attn_norm(h + a)
        return self.classifier(self.pool(h))


def make_batch(gen, templates, batch_size, frames):
    n_classes, n_mels, tlen = templates.shape
    labels = torch.randint(0, n_classes, (batch_size,), generator=gen)
    feats = 0.5 * torch.randn(batch_size, n_mels, frames, generator=gen)
    starts = torch.randint(0, frames - tlen, (batch_size,), generator=gen)
    for i in range(batch_size):
        s = int(starts[i])
        feats[i, :, s:s + tlen] += templates[labels[i]]
    return feats, labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--channels", type=int, default=32)
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 2024)
    cfg = KWSConfig(channels=args.channels, pool_in_fp32=(args.bug == "autocast-escape"))
    templates = torch.randn(cfg.n_classes, cfg.n_mels, 8, generator=gen)

    model = KeywordSpotter(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)

    model.train()
    for step in range(args.steps):
        feats, labels = make_batch(gen, templates, args.batch_size, args.frames)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(feats)
            loss = F.cross_entropy(logits.float(), labels, label_smoothing=0.05)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        acc = (logits.argmax(-1) == labels).float().mean().item()
        print(f"step {step} loss {loss.item():.4f} acc {acc:.2f}")


if __name__ == "__main__":
    main()
