"""Spectrally-normalised critic separating a ring-of-Gaussians from a blurred decoy.

Hinge loss, as used for SN-GAN discriminators.  Optionally reports validation
numbers before the first update (``--eval-at-start``).
"""
import argparse
import math
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import spectral_norm

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--lr", type=float, default=2e-3)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--hidden", type=int, default=64)
parser.add_argument("--eval-at-start", type=int, default=0)
parser.add_argument("--eval-every", type=int, default=0)
parser.add_argument("--betas", default="0.0,0.9")
parser.add_argument("--zero-grad", choices=["optimizer", "model"], default="optimizer")
parser.add_argument("--bug", default="none")


def ring(g, n, k=8, r=2.0):
    ang = 2 * math.pi * torch.randint(0, k, (n,), generator=g).float() / k
    centers = torch.stack([r * torch.cos(ang), r * torch.sin(ang)], 1)
    return centers + 0.05 * torch.randn(n, 2, generator=g)


def decoy(g, n):
    return 1.2 * torch.randn(n, 2, generator=g)


def make_critic(hidden):
    return nn.Sequential(OrderedDict([
        ("fc1", spectral_norm(nn.Linear(2, hidden))),
        ("act1", nn.LeakyReLU(0.2)),
        ("fc2", spectral_norm(nn.Linear(hidden, hidden))),
        ("act2", nn.LeakyReLU(0.2)),
        ("out", spectral_norm(nn.Linear(hidden, 1))),
    ]))


def hinge(critic, real, fake):
    return F.relu(1.0 - critic(real)).mean() + F.relu(1.0 + critic(fake)).mean()


@torch.no_grad()
def evaluate(critic, real, fake):
    critic.eval()
    loss = hinge(critic, real, fake).item()
    acc = 0.5 * ((critic(real) > 0).float().mean() + (critic(fake) < 0).float().mean()).item()
    critic.train()
    return loss, acc


if __name__ == "__main__":
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 7)
    val_real, val_fake = ring(g, 256), decoy(g, 256)

    critic = make_critic(args.hidden)
    b1, b2 = (float(v) for v in args.betas.split(","))
    opt = torch.optim.Adam(critic.parameters(), lr=args.lr, betas=(b1, b2))

    if args.eval_at_start or args.bug == "spectral-eval-first":
        if args.bug != "spectral-eval-first":
            # one training-mode pass so the power-iteration vectors are meaningful
            with torch.no_grad():
                critic.train()
                critic(val_real[:args.batch])
        l0, a0 = evaluate(critic, val_real, val_fake)
        print(f"init  val_hinge {l0:.4f} val_acc {a0:.3f}")

    critic.train()
    for it in range(args.steps):
        real, fake = ring(g, args.batch), decoy(g, args.batch)
        loss = hinge(critic, real, fake)
        if args.zero_grad == "model":
            critic.zero_grad(set_to_none=True)
        else:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"it {it} hinge {loss.item():.4f}")
        if args.eval_every and (it + 1) % args.eval_every == 0:
            val_loss, a = evaluate(critic, val_real, val_fake)
            print(f"  eval it {it} val_hinge {val_loss:.4f} val_acc {a:.3f}")

    val_loss, a = evaluate(critic, val_real, val_fake)
    print(f"final val_hinge {val_loss:.4f} val_acc {a:.3f}")
