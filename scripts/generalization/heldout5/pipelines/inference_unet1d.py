"""Inference only: batched forward passes of a small 1D U-Net signal denoiser under torch.inference_mode (no training, no optimizer)."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class UNet1d(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.down1 = nn.Conv1d(1, ch, 3, padding=1)
        self.down2 = nn.Conv1d(ch, 2 * ch, 3, padding=1, stride=2)
        self.mid = nn.Conv1d(2 * ch, 2 * ch, 3, padding=1)
        self.up = nn.ConvTranspose1d(2 * ch, ch, 4, stride=2, padding=1)
        self.out = nn.Conv1d(2 * ch, 1, 1)

    def forward(self, x):
        d1 = F.relu(self.down1(x))
        d2 = F.relu(self.down2(d1))
        u = F.relu(self.up(F.relu(self.mid(d2))))
        return x - self.out(torch.cat([u, d1], dim=1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8, help="number of inference batches")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--channels", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = UNet1d(args.channels).eval()
    g = torch.Generator().manual_seed(args.seed)
    t = torch.linspace(0, 1, 64)
    total_err = 0.0
    with torch.inference_mode():
        for batch_idx in range(args.steps):
            freq = torch.randint(1, 6, (args.batch_size, 1, 1), generator=g).float()
            clean = torch.sin(6.28 * freq * t)
            noisy = clean + 0.2 * torch.randn(clean.shape, generator=g)
            err = F.mse_loss(model(noisy), clean).item()
            total_err += err
            print(f"batch {batch_idx} mse {err:.4f}")
    print(f"mean mse {total_err / max(args.steps, 1):.4f}")


if __name__ == "__main__":
    main()
