"""Trains a small two-conv CNN on synthetic 16x16 single-channel "template + noise" images (5 classes)
with Adam and a DataLoader. Bug `no-zero-grad`: optimizer.zero_grad() got indented into the periodic
logging block, so after the first iteration gradients accumulate across iterations."""
import argparse
import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class SmallCNN(nn.Module):
    def __init__(self, n_classes=5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
        )
        self.classifier = nn.Linear(16 * 2 * 2, n_classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def make_images(gen, n, n_classes=5, size=16):
    templates = torch.randn(n_classes, 1, size, size, generator=gen)
    labels = torch.randint(0, n_classes, (n,), generator=gen)
    images = templates[labels] + 0.8 * torch.randn(n, 1, size, size, generator=gen)
    return images, labels


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--bug", choices=["none", "no-zero-grad"], default="none")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    images, labels = make_images(torch.Generator().manual_seed(7 + args.seed), 320)
    loader = DataLoader(TensorDataset(images, labels), batch_size=args.batch_size, shuffle=True,
                        drop_last=True, generator=torch.Generator().manual_seed(args.seed))
    batches = itertools.cycle(loader)

    model = SmallCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    for step in range(args.steps):
        x, y = next(batches)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if step % args.log_every == 0:
            print(f"step {step} loss {loss.item():.4f}")
            if args.bug == "no-zero-grad":
                optimizer.zero_grad()
        if args.bug != "no-zero-grad":
            optimizer.zero_grad()

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
