"""Convolutional VAE on synthetic blob images with KL annealing, gradient accumulation using
zero_grad(set_to_none=False), Adam(amsgrad), MultiStepLR, and a non-finite-loss guard that skips the update."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvVAE(nn.Module):
    def __init__(self, z):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, 8, 4, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 4, 2, 1), nn.ReLU(), nn.Flatten())
        self.mu = nn.Linear(16 * 4 * 4, z)
        self.logvar = nn.Linear(16 * 4 * 4, z)
        self.dec_in = nn.Linear(z, 16 * 4 * 4)
        self.dec = nn.Sequential(nn.ConvTranspose2d(16, 8, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(8, 1, 4, 2, 1))

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h).clamp(-6, 6)
        zs = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return self.dec(self.dec_in(zs).view(-1, 16, 4, 4)), mu, logvar


def blobs(g, n):
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    c = torch.rand(n, 2, generator=g) * 10 + 3
    r = torch.rand(n, generator=g) * 2 + 1.5
    d = (yy[None] - c[:, 0, None, None]) ** 2 + (xx[None] - c[:, 1, None, None]) ** 2
    return (d < r[:, None, None] ** 2).float().unsqueeze(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--latent", type=int, default=4)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--beta-max", type=float, default=1.0)
    ap.add_argument("--anneal-steps", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 6)
    vae = ConvVAE(args.latent)
    opt = torch.optim.Adam(vae.parameters(), lr=args.lr, amsgrad=True)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[4, 6], gamma=0.3)
    for step in range(args.steps):
        beta = args.beta_max * min(1.0, step / max(1, args.anneal_steps))
        opt.zero_grad(set_to_none=False)
        ok = True
        for _ in range(args.accum):
            x = blobs(g, args.batch_size)
            recon, mu, logvar = vae(x)
            rec = F.binary_cross_entropy_with_logits(recon, x, reduction="sum") / x.size(0)
            kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.size(0)
            loss = (rec + beta * kl) / args.accum
            if not torch.isfinite(loss):
                ok = False
                break
            loss.backward()
        if ok:
            opt.step()
        sched.step()
        print(f"step {step} rec {rec.item():.2f} kl {kl.item():.3f} beta {beta:.2f}")


if __name__ == "__main__":
    main()
