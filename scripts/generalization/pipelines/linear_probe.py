"""Linear probe: a conv feature extractor (with BatchNorm, kept in eval mode) is frozen with
requires_grad_(False) and only a linear head is trained (the optimizer only gets the head's parameters)
with Adam on synthetic blob images."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class ConvFeatures(nn.Module):
    def __init__(self, width=12):
        super().__init__()
        self.stem = nn.Conv2d(1, width, 5, padding=2)
        self.bn = nn.BatchNorm2d(width)
        self.conv = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.out_dim = 2 * width

    def forward(self, x):
        h = F.relu(self.bn(self.stem(x)))
        h = F.relu(self.conv(h))
        return h.mean(dim=(2, 3))


class ProbeModel(nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self.features = ConvFeatures()
        self.probe = nn.Linear(self.features.out_dim, n_classes)

    def forward(self, x):
        return self.probe(self.features(x))


def make_blob_images(gen, n, n_classes=3, size=12):
    labels = torch.randint(0, n_classes, (n,), generator=gen)
    coords = torch.arange(size).float()
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    cx = torch.rand(n, generator=gen) * size
    cy = torch.rand(n, generator=gen) * size
    radius = 1.5 + 1.5 * labels.float()
    d2 = (xx - cx[:, None, None]) ** 2 + (yy - cy[:, None, None]) ** 2
    img = torch.exp(-d2 / (2 * radius[:, None, None] ** 2))
    return (img + 0.1 * torch.randn(n, size, size, generator=gen)).unsqueeze(1), labels


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    x, y = make_blob_images(torch.Generator().manual_seed(args.seed), 320)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed))

    model = ProbeModel(n_classes=3)
    # pretend-pretrained features: frozen, BatchNorm statistics fixed
    model.features.requires_grad_(False)
    model.features.eval()
    optimizer = torch.optim.Adam(model.probe.parameters(), lr=args.lr)

    step = 0
    loss = torch.tensor(float("nan"))
    model.probe.train()
    while step < args.steps:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step >= args.steps:
                break

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
