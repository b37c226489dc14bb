"""Tiny U-Net for binary segmentation of synthetic blob images.

Images contain a few bright Gaussian blobs over structured noise; the mask is
the thresholded blob field. The U-Net has two down/up levels with skip
connections. Training uses gradient accumulation over micro-batches with a
OneCycleLR schedule stepped once per optimizer step, and a Dice + BCE loss.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_batch(gen, batch_size, size=12):
    yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
    images, masks = [], []
    for _ in range(batch_size):
        field = torch.zeros(size, size)
        for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
            cy, cx = (torch.rand(2, generator=gen) * size).tolist()
            r = 1.5 + 2.0 * float(torch.rand(1, generator=gen))
            field += torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
        masks.append((field > 0.5).float())
        images.append(field + 0.3 * torch.randn(size, size, generator=gen))
    return torch.stack(images).unsqueeze(1), torch.stack(masks).unsqueeze(1)


def conv_block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class TinyUNet(nn.Module):
    def __init__(self, base=8):
        super().__init__()
        self.enc1 = conv_block(1, base)
        self.enc2 = conv_block(base, 2 * base)
        self.bottleneck = conv_block(2 * base, 4 * base)
        self.up2 = nn.ConvTranspose2d(4 * base, 2 * base, 2, stride=2)
        self.dec2 = conv_block(4 * base, 2 * base)
        self.up1 = nn.ConvTranspose2d(2 * base, base, 2, stride=2)
        self.dec1 = conv_block(2 * base, base)
        self.out = nn.Conv2d(base, 1, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        b = self.bottleneck(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(b), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
        return self.out(d1)


def dice_bce(logits, target, eps=1.0):
    prob = logits.sigmoid()
    inter = (prob * target).sum((1, 2, 3))
    dice = 1 - (2 * inter + eps) / (prob.sum((1, 2, 3)) + target.sum((1, 2, 3)) + eps)
    return F.binary_cross_entropy_with_logits(logits, target) + dice.mean()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-2, help="OneCycle max lr")
    ap.add_argument("--batch-size", type=int, default=4, help="micro-batch size")
    ap.add_argument("--accum-steps", type=int, default=2)
    ap.add_argument("--base", type=int, default=8)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 5)
    model = TinyUNet(args.base)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.steps + 1,
                                                    pct_start=0.3)

    model.train()
    for step in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        running = 0.0
        for _ in range(args.accum_steps):
            images, masks = make_batch(gen, args.batch_size)
            loss = dice_bce(model(images), masks) / args.accum_steps
            loss.backward()
            running += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        print(f"step {step} loss {running:.4f} lr {scheduler.get_last_lr()[0]:.5f}")


if __name__ == "__main__":
    main()
