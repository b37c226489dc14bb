"""Estimate the dominant frequency of a noisy 1-D signal with a small Conv1d net."""
import argparse
import math
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class Config:
    steps: int = 8
    seed: int = 0
    lr: float = 0.02
    batch_size: int = 24
    accum: int = 1
    optimizer: str = "sgd"
    zero_via: str = "optimizer"   # optimizer | model
    zero_at: str = "top"          # top | after
    scheduler: str = "none"       # none | step | exp
    bug: str = "none"


def synth_signals(g, n, length=64):
    freq = 1.0 + 4.0 * torch.rand(n, 1, generator=g)
    phase = 2 * math.pi * torch.rand(n, 1, generator=g)
    amp = 0.5 + torch.rand(n, 1, generator=g)
    t = torch.linspace(0, 1, length).unsqueeze(0)
    x = amp * torch.sin(2 * math.pi * freq * t + phase)
    x = x + 0.2 * torch.randn(n, length, generator=g)
    return x.unsqueeze(1), (freq - 3.0) / 1.2


class SignalNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, 8, kernel_size=7, padding=3),
            nn.ReLU(),
            nn.MaxPool1d(2),
            nn.Conv1d(8, 16, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.AdaptiveAvgPool1d(4),
        )
        self.regressor = nn.Linear(16 * 4, 1)

    def forward(self, x):
        return self.regressor(self.features(x).flatten(1))


class Trainer:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        self.g = torch.Generator().manual_seed(cfg.seed)
        self.model = SignalNet()
        if cfg.optimizer == "sgd":
            self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=0.9)
        else:
            self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg.lr * 0.1)
        if cfg.scheduler == "step":
            self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=3, gamma=0.5)
        elif cfg.scheduler == "exp":
            self.sched = torch.optim.lr_scheduler.ExponentialLR(self.opt, gamma=0.9)
        else:
            self.sched = None
        self.loss_fn = nn.SmoothL1Loss()
        # Gradient hygiene; turned off by the bug switch.
        self.clear_grads = cfg.bug != "no-zero-grad"
        self.x_val, self.y_val = synth_signals(torch.Generator().manual_seed(999), 128)

    def zero(self):
        if not self.clear_grads:
            return
        if self.cfg.zero_via == "model":
            self.model.zero_grad()
        else:
            self.opt.zero_grad()

    def train_step(self, step):
        cfg = self.cfg
        self.model.train()
        if cfg.zero_at == "top":
            self.zero()
        total = 0.0
        for _ in range(cfg.accum):
            xb, yb = synth_signals(self.g, cfg.batch_size)
            loss = self.loss_fn(self.model(xb), yb) / cfg.accum
            loss.backward()
            total += loss.item()
        self.opt.step()
        if self.sched is not None:
            self.sched.step()
        if cfg.zero_at == "after":
            self.zero()
        return total

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        return nn.functional.mse_loss(self.model(self.x_val), self.y_val).item()

    def fit(self):
        for step in range(self.cfg.steps):
            loss = self.train_step(step)
            print(f"[{step:02d}] train {loss:.4f} lr {self.opt.param_groups[0]['lr']:.4g}")
        mse = self.validate()
        print(f"final val_mse={mse:.5f}")


def parse():
    p = argparse.ArgumentParser()
    for f, d in Config.__dataclass_fields__.items():
        p.add_argument("--" + f.replace("_", "-"), type=type(d.default), default=d.default)
    return Config(**vars(p.parse_args()))


if __name__ == "__main__":
    Trainer(parse()).fit()
