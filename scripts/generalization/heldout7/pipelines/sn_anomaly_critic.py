"""Spectrally-normalised 1-D conv critic that scores windows of a synthetic signal as normal/anomalous.

Lipschitz-constrained scorer (torch.nn.utils.spectral_norm on every conv/linear), RMSprop + StepLR,
an infinite batch iterator consumed with next(), and periodic validation AUROC-style accuracy.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import spectral_norm


@dataclass
class Config:
    steps: int = 40
    seed: int = 0
    lr: float = 1e-3
    batch_size: int = 32
    width: int = 16
    eval_every: int = 5
    sanity_val_batches: int = 0  # Lightning-style validation sanity check before fitting
    window: int = 64


class Critic(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.conv1 = spectral_norm(nn.Conv1d(1, width, 5, padding=2))
        self.conv2 = spectral_norm(nn.Conv1d(width, width, 5, stride=2, padding=2))
        self.conv3 = spectral_norm(nn.Conv1d(width, 2 * width, 3, stride=2, padding=1))
        self.fc = spectral_norm(nn.Linear(2 * width, 1))

    def forward(self, x):
        h = F.leaky_relu(self.conv1(x), 0.1)
        h = F.leaky_relu(self.conv2(h), 0.1)
        h = F.leaky_relu(self.conv3(h), 0.1)
        return self.fc(h.mean(-1)).squeeze(-1)


def signal_batches(gen: torch.Generator, batch: int, window: int):
    t = torch.linspace(0, 1, window)
    while True:
        freq = 3 + 4 * torch.rand(batch, 1, generator=gen)
        x = torch.sin(6.283 * freq * t) + 0.1 * torch.randn(batch, window, generator=gen)
        label = (torch.rand(batch, generator=gen) < 0.5).float()
        pos = torch.randint(0, window - 8, (batch,), generator=gen)
        spike = torch.zeros(batch, window)
        for i in torch.nonzero(label).flatten().tolist():
            spike[i, pos[i]:pos[i] + 8] = 1.5 * torch.randn(8, generator=gen)
        yield (x + spike).unsqueeze(1), label


@torch.no_grad()
def validate(model, batches, n_batches):
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    for _ in range(n_batches):
        x, y = next(batches)
        score = model(x)
        loss_sum += F.binary_cross_entropy_with_logits(score, y).item()
        correct += ((score > 0).float() == y).sum().item()
        total += y.numel()
    model.train()
    return loss_sum / n_batches, correct / total


def parse() -> Config:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=Config.steps)
    ap.add_argument("--seed", type=int, default=Config.seed)
    ap.add_argument("--bug", choices=["spectral-eval-first"], default=None)
    ap.add_argument("--lr", type=float, default=Config.lr)
    ap.add_argument("--batch-size", type=int, default=Config.batch_size)
    ap.add_argument("--width", type=int, default=Config.width)
    ap.add_argument("--eval-every", type=int, default=Config.eval_every)
    ap.add_argument("--save", default=None)
    a = ap.parse_args()
    cfg = Config(steps=a.steps, seed=a.seed, lr=a.lr, batch_size=a.batch_size, width=a.width,
                 eval_every=a.eval_every)
    if a.bug == "spectral-eval-first":
        cfg.sanity_val_batches = 2
    return cfg, a.save


def main():
    cfg, save = parse()
    torch.manual_seed(cfg.seed)
    train_iter = signal_batches(torch.Generator().manual_seed(cfg.seed), cfg.batch_size, cfg.window)
    val_iter = signal_batches(torch.Generator().manual_seed(10_000 + cfg.seed), 64, cfg.window)

    critic = Critic(cfg.width)
    opt = torch.optim.RMSprop(critic.parameters(), lr=cfg.lr, alpha=0.95)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=15, gamma=0.5)
    history = {"losses": [], "val": []}

    if cfg.sanity_val_batches:
        vloss, vacc = validate(critic, val_iter, cfg.sanity_val_batches)
        history["val"].append((-1, vloss, vacc))
        print(f"sanity check: val_loss={vloss:.4f} val_acc={vacc:.3f}")

    critic.train()
    for step in range(cfg.steps):
        x, y = next(train_iter)
        loss = F.binary_cross_entropy_with_logits(critic(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        history["losses"].append(loss.item())
        if (step + 1) % cfg.eval_every == 0:
            vloss, vacc = validate(critic, val_iter, 2)
            history["val"].append((step, vloss, vacc))
            print(f"step {step} loss {loss.item():.4f} val_loss {vloss:.4f} val_acc {vacc:.3f}")
    if save:
        torch.save({"state": critic.state_dict(), "losses": history["losses"], "extra": history["val"]}, save)


if __name__ == "__main__":
    main()
