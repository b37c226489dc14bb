"""Inference-only script: embeds a synthetic gallery/query set with a fixed random-feature conv encoder
(BatchNorm in eval, torch.inference_mode) and reports k-NN retrieval accuracy batch by batch.

There is no optimizer and no backward pass; ``--steps`` is the number of query batches processed.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def build_encoder(width):
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    )


def blobs(gen, n, n_cls=5, img=10):
    y = torch.randint(0, n_cls, (n,), generator=gen)
    yy, xx = torch.meshgrid(torch.arange(img).float(), torch.arange(img).float(), indexing="ij")
    cx = 2 + (y % 3).float() * 3
    cy = 2 + (y // 3).float() * 4
    g = torch.exp(-((xx - cx[:, None, None]) ** 2 + (yy - cy[:, None, None]) ** 2) / 3.0)
    return (g + 0.2 * torch.randn(n, img, img, generator=gen)).unsqueeze(1), y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--k", type=int, default=5)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    encoder = build_encoder(args.width).eval()
    gallery_x, gallery_y = blobs(gen, 200)
    with torch.inference_mode():
        gallery = F.normalize(encoder(gallery_x), dim=1)
        correct = total = 0
        for step in range(args.steps):
            qx, qy = blobs(gen, args.batch_size)
            q = F.normalize(encoder(qx), dim=1)
            nn_idx = (q @ gallery.t()).topk(args.k, dim=1).indices
            pred = gallery_y[nn_idx].mode(dim=1).values
            correct += (pred == qy).sum().item()
            total += len(qy)
            print(f"batch {step} running_knn_acc {correct / total:.3f}")


if __name__ == "__main__":
    main()
