"""Fine-tunes the decoder of a small MLP VAE on synthetic clustered data, encoder frozen.
Bug `optimizer-wrong-params`: the optimizer gets the frozen encoder's parameters instead of the
decoder's, so the decoder (the only part that receives gradients) is never updated.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Encoder(nn.Module):
    def __init__(self, d_in: int, d_hidden: int, d_latent: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(d_in, d_hidden), nn.SiLU(), nn.Linear(d_hidden, d_hidden), nn.SiLU()
        )
        self.mu = nn.Linear(d_hidden, d_latent)
        self.logvar = nn.Linear(d_hidden, d_latent)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(x)
        return self.mu(h), self.logvar(h).clamp(-6.0, 4.0)


class Decoder(nn.Module):
    def __init__(self, d_latent: int, d_hidden: int, d_out: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_latent, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.out = nn.Linear(d_hidden, d_out)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.fc1(z))
        h = F.silu(self.fc2(h))
        return self.out(h)


class VAE(nn.Module):
    def __init__(self, d_in: int = 24, d_hidden: int = 64, d_latent: int = 6) -> None:
        super().__init__()
        self.encoder = Encoder(d_in, d_hidden, d_latent)
        self.decoder = Decoder(d_latent, d_hidden, d_in)

    def forward(self, x: torch.Tensor):
        mu, logvar = self.encoder(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decoder(z), mu, logvar


def make_data(n: int, d: int, gen: torch.Generator) -> torch.Tensor:
    centers = torch.randn(4, d, generator=gen) * 2.0
    idx = torch.randint(0, 4, (n,), generator=gen)
    return centers[idx] + 0.3 * torch.randn(n, d, generator=gen)


def vae_loss(recon, x, mu, logvar, beta: float) -> torch.Tensor:
    rec = F.mse_loss(recon, x, reduction="sum") / x.shape[0]
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.shape[0]
    return rec + beta * kl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--optimizer", choices=["adam", "adamw"], default="adam")
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--bug", default="none", choices=["none", "optimizer-wrong-params"])
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    data = make_data(512, 24, gen)

    model = VAE()
    # Stage 2 of training: the encoder is treated as pretrained and kept fixed.
    frozen, tuned = model.encoder, model.decoder
    frozen.requires_grad_(False)
    trainable = tuned.parameters()
    if args.bug == "optimizer-wrong-params":
        trainable = frozen.parameters()

    opt_cls = torch.optim.AdamW if args.optimizer == "adamw" else torch.optim.Adam
    optimizer = opt_cls(trainable, lr=args.lr)

    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        idx = torch.randint(0, data.shape[0], (args.batch_size,), generator=gen)
        x = data[idx]
        recon, mu, logvar = model(x)
        loss = vae_loss(recon, x, mu, logvar, args.beta)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
