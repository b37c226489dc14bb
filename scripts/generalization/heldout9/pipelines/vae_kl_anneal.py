"""Gaussian VAE on low-rank synthetic data with linear KL annealing and periodic ELBO evaluation."""
import argparse

import torch
from torch import nn
from torch.nn import functional as F


class VAE(nn.Module):
    def __init__(self, d_x=24, d_h=64, d_z=4):
        super().__init__()
        self.fc1 = nn.Linear(d_x, d_h)
        self.fc_mu = nn.Linear(d_h, d_z)
        self.fc_logvar = nn.Linear(d_h, d_z)
        self.fc3 = nn.Linear(d_z, d_h)
        self.fc4 = nn.Linear(d_h, d_x)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc_mu(h1), self.fc_logvar(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        return self.fc4(F.relu(self.fc3(z)))

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = self.reparameterize(mu, logvar) if self.training else mu
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar, beta):
    rec = F.mse_loss(recon_x, x, reduction="sum") / x.shape[0]
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.shape[0]
    return rec + beta * kld, rec, kld


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(3, 24, generator=torch.Generator().manual_seed(77))
    z = torch.randn(n, 3, generator=g)
    return torch.tanh(z @ mix) + 0.05 * torch.randn(n, 24, generator=g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--anneal-steps", type=int, default=6)
    ap.add_argument("--eval-every", type=int, default=2)
    ap.add_argument("--zero-grad", choices=["optimizer", "model"], default="optimizer")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    train_x = make_data(1024, args.seed + 1)
    test_x = make_data(256, 4321)
    model = VAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    perm = torch.randperm(len(train_x))

    def test():
        model.eval()
        with torch.no_grad():
            recon, mu, logvar = model(test_x)
            loss, rec, kld = loss_function(recon, test_x, mu, logvar, beta=1.0)
        return loss.item(), rec.item(), kld.item()

    for step in range(args.steps):
        model.train()
        idx = perm[(step * args.batch_size) % len(perm):][: args.batch_size]
        data = train_x[idx]
        beta = min(1.0, (step + 1) / max(1, args.anneal_steps))
        if args.zero_grad == "model":
            model.zero_grad()
        else:
            optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss, rec, kld = loss_function(recon_batch, data, mu, logvar, beta)
        loss.backward()
        optimizer.step()
        print(f"step {step} beta {beta:.2f} loss {loss.item():.3f} rec {rec.item():.3f} kl {kld.item():.3f}")
        if args.eval_every and (step + 1) % args.eval_every == 0:
            tl, tr, tk = test()
            print(f"====> test ELBO-loss {tl:.3f} (rec {tr:.3f}, kl {tk:.3f})")

    tl, tr, tk = test()
    print(f"final test_loss {tl:.4f}")


if __name__ == "__main__":
    main()
