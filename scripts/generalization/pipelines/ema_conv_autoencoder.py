"""Trains a small convolutional autoencoder (Conv2d encoder, ConvTranspose2d decoder) on synthetic
8x8 shape images with Adam and clip_grad_norm_, keeping an exponential moving average of the weights in
torch.optim.swa_utils.AveragedModel; the EMA copy is evaluated at the end."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


class ConvAutoencoder(nn.Module):
    def __init__(self, width=8, code=4):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, width, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(width, code, 3, stride=2, padding=1),
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose2d(code, width, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(width, 1, 4, stride=2, padding=1),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def make_shapes(gen, n, size=8):
    imgs = torch.zeros(n, 1, size, size)
    kind = torch.randint(0, 2, (n,), generator=gen)
    r0 = torch.randint(0, size - 3, (n,), generator=gen)
    c0 = torch.randint(0, size - 3, (n,), generator=gen)
    for i in range(n):
        r, c = int(r0[i]), int(c0[i])
        if kind[i] == 0:
            imgs[i, 0, r:r + 3, c:c + 3] = 1.0  # filled square
        else:
            imgs[i, 0, r + 1, c:c + 3] = 1.0  # plus sign
            imgs[i, 0, r:r + 3, c + 1] = 1.0
    return imgs + 0.05 * torch.randn(n, 1, size, size, generator=gen)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--ema-decay", type=float, default=0.9)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    data = make_shapes(gen, 256)
    held_out = make_shapes(gen, 64)

    model = ConvAutoencoder()
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(args.ema_decay))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    for _step in range(args.steps):
        idx = torch.randint(0, len(data), (args.batch_size,), generator=gen)
        batch = data[idx]
        loss = F.mse_loss(model(batch), batch)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        ema.update_parameters(model)

    ema.eval()
    with torch.no_grad():
        ema_loss = F.mse_loss(ema(held_out), held_out).item()
    print(f"ema held-out loss {ema_loss:.6f}")
    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
