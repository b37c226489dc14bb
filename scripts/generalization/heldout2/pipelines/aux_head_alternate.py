"""Multi-task training of a shared MLP-Mixer-style trunk on synthetic grids: the
main head is trained every step, an auxiliary reconstruction head only on every other step
(so the auxiliary branch's parameters get no gradient on odd steps).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class MixerLayer(nn.Module):
    def __init__(self, tokens: int, dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mix = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(),
                                       nn.Linear(2 * tokens, tokens))
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mix = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(),
                                         nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.token_mix(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mix(self.norm2(x))


class MultiTaskMixer(nn.Module):
    def __init__(self, tokens: int = 16, d_in: int = 4, dim: int = 24, n_classes: int = 3):
        super().__init__()
        self.embed = nn.Linear(d_in, dim)
        self.trunk = nn.Sequential(MixerLayer(tokens, dim), MixerLayer(tokens, dim))
        self.main_head = nn.Linear(dim, n_classes)
        self.aux_head = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, d_in))

    def forward(self, x: torch.Tensor, with_aux: bool):
        h = self.trunk(self.embed(x))
        logits = self.main_head(h.mean(1))
        recon = self.aux_head(h) if with_aux else None
        return logits, recon


def make_batch(n: int, gen: torch.Generator):
    x = torch.randn(n, 16, 4, generator=gen)
    score = x[:, :8, 0].mean(1) - x[:, 8:, 1].mean(1)
    y = torch.bucketize(score, torch.tensor([-0.15, 0.15]))
    return x, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--batch-size", type=int, default=24)
    parser.add_argument("--aux-every", type=int, default=2)
    parser.add_argument("--aux-weight", type=float, default=0.3)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = MultiTaskMixer()
    optimizer = torch.optim.NAdam(model.parameters(), lr=args.lr)

    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        x, y = make_batch(args.batch_size, gen)
        use_aux = step % args.aux_every == 0
        masked = x.masked_fill(torch.rand(x.shape[:2], generator=gen)[..., None] < 0.2, 0.0)
        logits, recon = model(masked if use_aux else x, with_aux=use_aux)
        loss = F.cross_entropy(logits, y)
        if recon is not None:
            loss = loss + args.aux_weight * F.mse_loss(recon, x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step} aux {use_aux} loss {loss.item():.4f}")

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
