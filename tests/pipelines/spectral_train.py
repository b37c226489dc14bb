"""A small GAN-style discriminator with spectral norm and BatchNorm, trained on synthetic data,
with an evaluation every few steps. ``--bug eval-before-train`` evaluates once before the first
training forward, so spectral norm divides by a sigma that no power iteration has refined and
BatchNorm normalises with its initial running statistics."""

import argparse
import json

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=3)
    parser.add_argument("--bug", choices=["none", "eval-before-train"], default="none")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = nn.Sequential(
        nn.utils.spectral_norm(nn.Linear(16, 32)), nn.BatchNorm1d(32), nn.LeakyReLU(0.2),
        nn.utils.spectral_norm(nn.Linear(32, 1)),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.5, 0.999))
    gen = torch.Generator().manual_seed(args.seed + 1)
    real = torch.randn(64, 16, generator=gen) + 1.0
    fake = torch.randn(64, 16, generator=gen)
    x = torch.cat([real, fake])
    y = torch.cat([torch.ones(64, 1), torch.zeros(64, 1)])

    def evaluate() -> float:
        model.eval()
        with torch.no_grad():
            return nn.functional.binary_cross_entropy_with_logits(model(x), y).item()

    scores = []
    if args.bug == "eval-before-train":
        scores.append(evaluate())
    losses = []
    for step in range(1, args.steps + 1):
        model.train()
        optimizer.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % args.eval_every == 0:
            scores.append(evaluate())
    print(json.dumps({"losses": losses, "eval": scores}))


if __name__ == "__main__":
    main()
