"""Trains a small U-Net-like denoiser (skip connections, custom Kaiming init) on noisy blob images.
Bug `double-init`: the init routine lists the bottleneck both as an encoder stage and as a decoder
stage, so the bottleneck conv weights are initialised twice.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

BUG = "none"


class ConvBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(x)))


class UpStage(nn.Module):
    def __init__(self, c_in: int, c_skip: int, c_out: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(c_in, c_out, 2, stride=2)
        self.block = ConvBlock(c_out + c_skip, c_out)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.block(torch.cat([self.up(x), skip], dim=1))


class UNet(nn.Module):
    def __init__(self, channels: int = 1, base: int = 8) -> None:
        super().__init__()
        self.down1 = ConvBlock(channels, base)
        self.down2 = ConvBlock(base, base * 2)
        self.mid = ConvBlock(base * 2, base * 4)
        self.up2 = UpStage(base * 4, base * 2, base * 2)
        self.up1 = UpStage(base * 2, base, base)
        self.out = nn.Conv2d(base, channels, 1)
        self.init_weights()

    def init_weights(self) -> None:
        encoder_stages = [self.down1, self.down2]
        if BUG == "double-init":
            encoder_stages = [self.down1, self.down2, self.mid]
        decoder_stages = [self.mid, self.up2, self.up1]
        for stage in encoder_stages + decoder_stages:
            for m in stage.modules():
                if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                    nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                    nn.init.zeros_(m.bias)
        nn.init.xavier_uniform_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s1 = self.down1(x)
        s2 = self.down2(F.max_pool2d(s1, 2))
        h = self.mid(F.max_pool2d(s2, 2))
        h = self.up2(h, s2)
        h = self.up1(h, s1)
        return x - self.out(h)  # predict the noise, return the denoised image


def make_clean_images(n: int, size: int, gen: torch.Generator) -> torch.Tensor:
    yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
    centers = torch.rand(n, 3, 2, generator=gen) * size
    radii = 1.5 + 2.5 * torch.rand(n, 3, generator=gen)
    d2 = (yy[None, None] - centers[..., 0, None, None]) ** 2
    d2 = d2 + (xx[None, None] - centers[..., 1, None, None]) ** 2
    blobs = torch.exp(-d2 / (2 * radii[..., None, None] ** 2)).sum(1)
    return blobs.unsqueeze(1)


def main() -> None:
    global BUG
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--noise", type=float, default=0.3)
    parser.add_argument("--bug", default="none", choices=["none", "double-init"])
    args = parser.parse_args()
    BUG = args.bug

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = UNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        clean = make_clean_images(args.batch_size, 16, gen)
        noisy = clean + args.noise * torch.randn(clean.shape, generator=gen)
        loss = F.mse_loss(model(noisy), clean)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.5f}")

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
