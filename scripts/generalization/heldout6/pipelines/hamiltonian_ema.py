"""Hamiltonian neural network learning a mass-spring system; ExponentialLR and an EMA copy of the weights."""
import argparse
import copy

import torch
from torch import nn


class HNN(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.h = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                               nn.Linear(hidden, 1))

    def forward(self, qp):
        qp = qp.requires_grad_(True)
        energy = self.h(qp).sum()
        dh, = torch.autograd.grad(energy, qp, create_graph=True)
        return torch.stack([dh[:, 1], -dh[:, 0]], dim=1)


@torch.no_grad()
def ema_update(ema, model, decay):
    for pe, pm in zip(ema.parameters(), model.parameters(), strict=True):
        pe.lerp_(pm, 1 - decay)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--ema-decay", type=float, default=0.9)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    model = HNN(args.hidden)
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    for step in range(args.steps):
        qp = torch.randn(args.batch_size, 2, generator=gen)
        target = torch.stack([qp[:, 1], -qp[:, 0]], 1)  # H = (q^2 + p^2) / 2
        loss = (model(qp) - target).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        ema_update(ema, model, args.ema_decay)
        print(f"step {step} loss {loss.item():.4f}")
    test = torch.randn(64, 2, generator=gen)
    ema_err = (ema(test) - torch.stack([test[:, 1], -test[:, 0]], 1)).pow(2).mean().item()
    print(f"ema model error {ema_err:.4f}")


if __name__ == "__main__":
    main()
