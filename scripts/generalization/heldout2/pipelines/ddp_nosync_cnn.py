"""Two-rank DDP (gloo) training of a small conv net on synthetic 12x12 digit-like glyphs with
gradient accumulation: the first micro-batches of each step run under `no_sync()` and only the
last one all-reduces the accumulated gradients.
"""

from __future__ import annotations

import argparse
import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class GlyphNet(nn.Module):
    def __init__(self, n_classes: int = 6) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(16 * 3 * 3, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


def glyph_batch(n: int, templates: torch.Tensor, gen: torch.Generator):
    labels = torch.randint(0, templates.shape[0], (n,), generator=gen)
    shifts = torch.randint(-1, 2, (n, 2), generator=gen)
    imgs = torch.stack([
        torch.roll(templates[lab], shifts=(int(s[0]), int(s[1])), dims=(0, 1))
        for lab, s in zip(labels.tolist(), shifts, strict=True)
    ])
    return (imgs + 0.3 * torch.randn(imgs.shape, generator=gen)).unsqueeze(1), labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--accum", type=int, default=2)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    torch.manual_seed(args.seed)
    templates = (torch.rand(6, 12, 12, generator=torch.Generator().manual_seed(123)) > 0.6)
    templates = templates.float()
    model = DDP(GlyphNet())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    gen = torch.Generator().manual_seed(args.seed * 10 + rank)  # different data per rank

    model.train()
    step_loss = 0.0
    for step in range(args.steps):
        optimizer.zero_grad()
        step_loss = 0.0
        for micro in range(args.accum):
            x, y = glyph_batch(args.micro_batch, templates, gen)
            sync_now = micro == args.accum - 1
            ctx = contextlib.nullcontext() if sync_now else model.no_sync()
            with ctx:
                loss = F.cross_entropy(model(x), y) / args.accum
                loss.backward()
            step_loss += loss.item()
        optimizer.step()
        if rank == 0:
            print(f"step {step} loss {step_loss:.4f}")

    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"rank {rank} param checksum {checksum:.8f}")
    if rank == 0:
        print(f"final loss {step_loss:.6f}")
    del model, optimizer  # release DDP's reducer before tearing down the process group
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
