"""Weight-normalised 1-D transposed-conv upsampler reconstructing a high-rate signal from a decimated one;
linear LR warm-up starting from exactly zero."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm


class Upsampler(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.pre = weight_norm(nn.Conv1d(1, ch, 3, padding=1))
        self.up = weight_norm(nn.ConvTranspose1d(ch, ch, 4, stride=2, padding=1))
        self.post = weight_norm(nn.Conv1d(ch, 1, 3, padding=1))

    def forward(self, x):
        return self.post(F.leaky_relu(self.up(F.leaky_relu(self.pre(x), 0.1)), 0.1))


def signals(gen, n, length):
    t = torch.linspace(0, 1, length)
    f = torch.rand(n, 1, generator=gen) * 6 + 1
    ph = torch.rand(n, 1, generator=gen) * 6.28
    return torch.sin(2 * 3.1416 * f * t[None] + ph).unsqueeze(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--channels", type=int, default=16)
    p.add_argument("--warmup", type=int, default=4)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    model = Upsampler(args.channels)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    # factor is 0.0 for the very first step: the first update is a no-op by design
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / args.warmup))
    for step in range(args.steps):
        hi = signals(gen, args.batch_size, 64)
        loss = F.mse_loss(model(hi[..., ::2]), hi)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        print(f"step {step} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.5f}")


if __name__ == "__main__":
    main()
