"""VQ-VAE on synthetic piecewise-constant 1-D signals.

* codebook is a set of buffers updated in forward() by exponential moving averages (no grads),
* a custom autograd.Function implements the straight-through estimator for quantisation,
* the encoder runs under torch.utils.checkpoint (activation recomputation in backward).
Adam on encoder/decoder only; commitment loss; one step = one optimizer update.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, zq):
        return zq

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out, None


class EMACodebook(nn.Module):
    def __init__(self, k, d, decay=0.9, eps=1e-5):
        super().__init__()
        self.decay, self.eps = decay, eps
        embed = torch.randn(k, d)
        self.register_buffer("embed", embed)
        self.register_buffer("cluster_size", torch.ones(k))
        self.register_buffer("embed_sum", embed.clone())

    def forward(self, z):  # z: (N, d)
        dist = torch.cdist(z, self.embed)
        idx = dist.argmin(1)
        zq = self.embed[idx]
        if self.training:
            with torch.no_grad():
                onehot = F.one_hot(idx, self.embed.shape[0]).type_as(z)
                self.cluster_size.mul_(self.decay).add_(onehot.sum(0), alpha=1 - self.decay)
                self.embed_sum.mul_(self.decay).add_(onehot.t() @ z, alpha=1 - self.decay)
                n = self.cluster_size.sum()
                size = (self.cluster_size + self.eps) / (n + self.embed.shape[0] * self.eps) * n
                self.embed.copy_(self.embed_sum / size.unsqueeze(1))
        return zq, idx


class VQVAE(nn.Module):
    def __init__(self, d=8, k=16, ch=16):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv1d(1, ch, 4, 2, 1), nn.ReLU(), nn.Conv1d(ch, d, 4, 2, 1))
        self.codebook = EMACodebook(k, d)
        self.decoder = nn.Sequential(nn.ConvTranspose1d(d, ch, 4, 2, 1), nn.ReLU(), nn.ConvTranspose1d(ch, 1, 4, 2, 1))

    def forward(self, x):
        z = checkpoint(self.encoder, x, use_reentrant=False)
        b, d, t = z.shape
        flat = z.permute(0, 2, 1).reshape(-1, d)
        zq, idx = self.codebook(flat.detach())
        commit = F.mse_loss(flat, zq)
        zq = StraightThrough.apply(flat, zq).view(b, t, d).permute(0, 2, 1)
        return self.decoder(zq), commit, idx


def piecewise(gen, n, length=32):
    levels = torch.randn(n, length // 8, generator=gen)
    return levels.repeat_interleave(8, dim=1).unsqueeze(1) + 0.05 * torch.randn(n, 1, length, generator=gen)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--codes", type=int, default=16)
    ap.add_argument("--beta", type=float, default=0.25)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    data = piecewise(gen, 1024)
    model = VQVAE(k=args.codes)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)  # the codebook has no parameters, only buffers
    batches = iter(torch.split(data[torch.randperm(len(data), generator=gen)], args.batch_size))
    model.train()
    for step in range(args.steps):
        try:
            xb = next(batches)
        except StopIteration:
            batches = iter(torch.split(data[torch.randperm(len(data), generator=gen)], args.batch_size))
            xb = next(batches)
        recon, commit, idx = model(xb)
        loss = F.mse_loss(recon, xb) + args.beta * commit
        opt.zero_grad()
        loss.backward()
        opt.step()
        used = idx.unique().numel()
        print(f"step {step} loss {loss.item():.4f} commit {commit.item():.4f} codes_used {used}")


if __name__ == "__main__":
    main()
