"""Pretext stage, then fine-tuning: an encoder trained with a reconstruction head and Adam,
then the lower layer frozen and a classifier trained with a new optimizer bound to the same
variable (the first one is gone). The reconstruction head keeps the grad of its last pretext
step for the rest of the run: nothing clears it, and nothing needs to."""

import argparse
import json

import torch
from torch import nn
from torch.nn import functional as F


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pretext-steps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="fine-tuning steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-2)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    encoder = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())
    recon_head = nn.Linear(16, 12)
    gen = torch.Generator().manual_seed(args.seed + 1)
    x_all, y_all = torch.randn(64, 12, generator=gen), torch.randint(0, 3, (64,), generator=gen)

    optimizer = torch.optim.Adam(list(encoder.parameters()) + list(recon_head.parameters()), lr=args.lr)
    losses = []
    for _ in range(args.pretext_steps):
        idx = torch.randint(0, 64, (16,), generator=gen)
        loss = F.mse_loss(recon_head(encoder(x_all[idx])), x_all[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

    encoder[0].requires_grad_(False)
    classifier = nn.Linear(16, 3)
    optimizer = torch.optim.SGD(list(encoder[2].parameters()) + list(classifier.parameters()), lr=args.lr,
                                momentum=0.9)
    for _ in range(args.steps):
        idx = torch.randint(0, 64, (16,), generator=gen)
        loss = F.cross_entropy(classifier(encoder(x_all[idx])), y_all[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
