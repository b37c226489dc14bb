"""Variational autoencoder on a synthetic Gaussian-mixture dataset.

A Gaussian encoder/decoder VAE with the reparameterisation trick, trained on
the negative ELBO (Gaussian reconstruction + KL) with linear KL warm-up.
Batches are cut by hand from a fixed pre-generated dataset tensor.
"""
import argparse
import math

import torch
import torch.nn as nn


def make_dataset(gen, n, dim, n_components=4):
    centers = torch.randn(n_components, dim, generator=gen) * 2.0
    comp = torch.randint(0, n_components, (n,), generator=gen)
    return centers[comp] + 0.3 * torch.randn(n, dim, generator=gen)


class Encoder(nn.Module):
    def __init__(self, dim, hidden, latent):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU())
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)

    def forward(self, x):
        h = self.body(x)
        return self.mu(h), self.logvar(h).clamp(-8.0, 8.0)


class Decoder(nn.Module):
    def __init__(self, dim, hidden, latent):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(latent, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, dim))
        self.log_sigma = nn.Parameter(torch.zeros(dim))

    def forward(self, z):
        return self.net(z)


class VAE(nn.Module):
    def __init__(self, dim, hidden, latent):
        super().__init__()
        self.encoder = Encoder(dim, hidden, latent)
        self.decoder = Decoder(dim, hidden, latent)

    def forward(self, x):
        mu, logvar = self.encoder(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decoder(z), mu, logvar


def neg_elbo(model, x, beta):
    recon, mu, logvar = model(x)
    log_sigma = model.decoder.log_sigma
    nll = 0.5 * (((x - recon) / log_sigma.exp()) ** 2 + 2 * log_sigma + math.log(2 * math.pi)).sum(-1)
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(-1)
    return (nll + beta * kl).mean(), nll.mean(), kl.mean()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--latent", type=int, default=4)
    ap.add_argument("--warmup-steps", type=int, default=4, help="KL annealing steps")
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 17)
    dim = 12
    data = make_dataset(gen, 256, dim)

    model = VAE(dim, args.hidden, args.latent)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    optimizer.zero_grad(set_to_none=True)
    for step in range(args.steps):
        idx = torch.randint(0, data.shape[0], (args.batch_size,), generator=gen)
        x = data[idx]
        beta = min(1.0, (step + 1) / args.warmup_steps)
        loss, nll, kl = neg_elbo(model, x, beta)
        loss.backward()
        optimizer.step()
        if args.bug != "no-zero-grad":
            optimizer.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.3f} nll {nll.item():.3f} kl {kl.item():.3f} beta {beta:.2f}")


if __name__ == "__main__":
    main()
