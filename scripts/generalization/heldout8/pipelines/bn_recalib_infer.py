"""Inference-only pipeline: a randomly initialised ResNet-ish net gets BatchNorm statistics re-estimated
(train-mode forward passes under no_grad, cumulative averaging with momentum=None), then batched scoring in
inference_mode. No optimizer; --steps is the number of calibration batches."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


class TinyResNet(nn.Module):
    def __init__(self, c, n_blocks, n_classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.blocks = nn.Sequential(*[BasicBlock(c) for _ in range(n_blocks)])
        self.fc = nn.Linear(c, n_classes)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--channels", type=int, default=8)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--eval-batches", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 4)
    model = TinyResNet(args.channels, args.blocks, 10)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # cumulative moving average
    model.train()
    with torch.no_grad():
        for step in range(args.steps):
            x = torch.randn(args.batch_size, 3, 12, 12, generator=g) * 1.5 + 0.3
            model(x)
            print(f"calib batch {step} bn1 mean[0] {model.blocks[0].bn1.running_mean[0].item():.4f}")
    model.eval()
    hist = torch.zeros(10, dtype=torch.long)
    with torch.inference_mode():
        for _ in range(args.eval_batches):
            x = torch.randn(args.batch_size, 3, 12, 12, generator=g) * 1.5 + 0.3
            hist += torch.bincount(model(x).argmax(1), minlength=10)
    print("prediction histogram", hist.tolist())


if __name__ == "__main__":
    main()
