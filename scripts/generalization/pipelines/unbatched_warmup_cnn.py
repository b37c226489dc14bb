"""Trains a small Conv2d regressor (predicting the centre of mass of synthetic 2x12x12 images) with NAdam and
an ExponentialLR schedule; before training, a warm-up/shape-check forward runs on a single unbatched 3-D
(C, H, W) sample under torch.no_grad()."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class CenterNet(nn.Module):
    def __init__(self, in_ch=2, width=8):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(3)
        self.fc = nn.Linear(width * 9, 2)

    def forward(self, x):  # x: (C, H, W) or (N, C, H, W)
        h = F.relu(self.conv1(x))
        h = F.relu(self.conv2(h))
        h = torch.flatten(self.pool(h), start_dim=-3)
        return self.fc(h)


def make_images(gen, n, size=12):
    coords = torch.arange(size).float()
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    centers = torch.rand(n, 2, generator=gen) * (size - 1)
    d2 = (xx - centers[:, 0, None, None]) ** 2 + (yy - centers[:, 1, None, None]) ** 2
    spot = torch.exp(-d2 / 4.0)
    background = 0.2 * torch.randn(n, size, size, generator=gen)
    img = torch.stack([spot + background, spot.sqrt()], dim=1)
    return img, centers / (size - 1)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--batch-size", type=int, default=20)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    images, targets = make_images(gen, 300)

    model = CenterNet()
    model.eval()
    with torch.no_grad():
        single = model(images[0])  # unbatched (C, H, W) input
    assert single.shape == (2,), single.shape

    optimizer = torch.optim.NAdam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)

    model.train()
    for _step in range(args.steps):
        idx = torch.randint(0, len(images), (args.batch_size,), generator=gen)
        loss = F.mse_loss(model(images[idx]), targets[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
