"""Spectrally-normalised small CNN (Lipschitz-constrained classifier) on synthetic 12x12 images, SGD+nesterov,
with Lightning-style sanity validation option and periodic validation."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import spectral_norm


class LipschitzCNN(nn.Module):
    def __init__(self, width, n_classes):
        super().__init__()
        self.features = nn.Sequential(
            spectral_norm(nn.Conv2d(1, width, 3, padding=1)),
            nn.BatchNorm2d(width),
            nn.LeakyReLU(0.1),
            spectral_norm(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)),
            nn.LeakyReLU(0.1),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = spectral_norm(nn.Linear(2 * width, n_classes))

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def synth_batch(gen, bs, n_classes):
    y = torch.randint(0, n_classes, (bs,), generator=gen)
    x = torch.randn(bs, 1, 12, 12, generator=gen) * 0.5
    for c in range(n_classes):
        m = y == c
        x[m, :, c:c + 3, :] += 1.5
    return x, y


@torch.no_grad()
def validate(model, batches):
    model.eval()
    correct = total = 0
    for x, y in batches:
        correct += (model(x).argmax(1) == y).sum().item()
        total += y.numel()
    model.train()
    return correct / total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--val-every", type=int, default=4)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 11)
    n_classes = 4
    val_batches = [synth_batch(gen, 32, n_classes) for _ in range(2)]
    model = LipschitzCNN(args.width, n_classes)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True)
    num_sanity_val_steps = 2 if args.bug == "spectral-eval-first" else 0
    if num_sanity_val_steps:
        acc = validate(model, val_batches[:num_sanity_val_steps])
        print(f"sanity check val acc {acc:.3f}")
    model.train()
    for step in range(args.steps):
        x, y = synth_batch(gen, args.batch_size, n_classes)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        msg = f"step {step} loss {loss.item():.4f}"
        if (step + 1) % args.val_every == 0:
            msg += f" val_acc {validate(model, val_batches):.3f}"
        print(msg)


if __name__ == "__main__":
    main()
