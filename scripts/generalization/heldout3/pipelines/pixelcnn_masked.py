"""PixelCNN-like autoregressive model with masked convolutions on synthetic binary 8x8 images.

Custom weight init routine (masked convs have their own reset). --bug double-init.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class MaskedConv2d(nn.Conv2d):
    def __init__(self, mask_type: str, cin: int, cout: int, k: int):
        super().__init__(cin, cout, k, padding=k // 2)
        mask = torch.ones_like(self.weight)
        c = k // 2
        mask[:, :, c, c + (mask_type == "B") :] = 0
        mask[:, :, c + 1 :] = 0
        self.register_buffer("mask", mask)
        self.reset_masked()

    def reset_masked(self):
        fan_in = self.mask[0].sum().item()
        with torch.no_grad():
            self.weight.normal_(0.0, (2.0 / fan_in) ** 0.5).mul_(self.mask)
            self.bias.zero_()

    def forward(self, x):
        return F.conv2d(x, self.weight * self.mask, self.bias, padding=self.padding)


class ResidualMasked(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.conv = MaskedConv2d("B", ch, ch, 3)
        self.mix = nn.Conv2d(ch, ch, 1)

    def forward(self, x):
        return x + self.mix(F.relu(self.conv(F.relu(x))))


class PixelCNN(nn.Module):
    def __init__(self, ch: int = 16, n_blocks: int = 3):
        super().__init__()
        self.conv_in = MaskedConv2d("A", 1, ch, 5)
        self.blocks = nn.Sequential(*[ResidualMasked(ch) for _ in range(n_blocks)])
        self.conv_out = nn.Conv2d(ch, 1, 1)

    def forward(self, x):
        return self.conv_out(F.relu(self.blocks(self.conv_in(x))))


def init_weights(model: nn.Module, include_masked: bool):
    for m in model.modules():
        # masked convs already did a fan-in-aware init in their constructor
        is_plain = type(m) is nn.Conv2d
        if is_plain or (include_masked and isinstance(m, nn.Conv2d)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)


def sample_images(gen, n):
    base = torch.rand(n, 1, 1, 8, generator=gen) < 0.5
    rows = base.expand(n, 1, 8, 8).clone().float()
    noise = (torch.rand(n, 1, 8, 8, generator=gen) < 0.05).float()
    return (rows + noise) % 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--bug", default="none", choices=["none", "double-init"])
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = PixelCNN(n_blocks=args.blocks)
    init_weights(model, include_masked=args.bug == "double-init")
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        imgs = sample_images(gen, args.batch_size)
        logits = model(imgs)
        loss = F.binary_cross_entropy_with_logits(logits, imgs)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
