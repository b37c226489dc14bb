"""Tied-weight sparse autoencoder (dictionary learning) on synthetic sparse codes.

Data are sparse non-negative combinations of a hidden over-complete
dictionary. The encoder is ReLU(W (x - b_dec) + b_enc); the decoder reuses
the same W transposed (weight tying via F.linear(z, W.t())). Loss is MSE
reconstruction plus an L1 sparsity penalty on the codes. After each optimizer
step the dictionary rows are renormalised to unit norm under no_grad.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class TiedSAE(nn.Module):
    def __init__(self, dim, n_latents):
        super().__init__()
        self.W = nn.Parameter(torch.randn(n_latents, dim) / dim ** 0.5)
        self.b_enc = nn.Parameter(torch.zeros(n_latents))
        self.b_dec = nn.Parameter(torch.zeros(dim))

    def encode(self, x):
        return F.relu(F.linear(x - self.b_dec, self.W, self.b_enc))

    def decode(self, z):
        return F.linear(z, self.W.t(), self.b_dec)

    def forward(self, x):
        z = self.encode(x)
        return self.decode(z), z

    @torch.no_grad()
    def normalize_dictionary(self):
        self.W.div_(self.W.norm(dim=1, keepdim=True).clamp_min(1e-8))


def make_batch(gen, dictionary, batch_size, active=3):
    n_atoms = dictionary.shape[0]
    codes = torch.zeros(batch_size, n_atoms)
    for i in range(batch_size):
        idx = torch.randperm(n_atoms, generator=gen)[:active]
        codes[i, idx] = torch.rand(active, generator=gen) + 0.5
    return codes @ dictionary + 0.01 * torch.randn(batch_size, dictionary.shape[1], generator=gen)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--latents", type=int, default=48)
    ap.add_argument("--l1", type=float, default=1e-3)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 50)
    dim = 16
    true_dict = F.normalize(torch.randn(32, dim, generator=gen), dim=1)
    model = TiedSAE(dim, args.latents)
    model.normalize_dictionary()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    for step in range(args.steps):
        x = make_batch(gen, true_dict, args.batch_size)
        recon, z = model(x)
        mse = F.mse_loss(recon, x)
        sparsity = z.abs().sum(-1).mean()
        loss = mse + args.l1 * sparsity
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        model.normalize_dictionary()
        print(f"step {step} mse {mse.item():.4f} l0 {(z > 0).float().sum(-1).mean().item():.1f}")


if __name__ == "__main__":
    main()
