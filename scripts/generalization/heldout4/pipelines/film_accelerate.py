"""FiLM-conditioned function regressor trained with HF Accelerate on CPU.

Each sample is a query point x plus a task descriptor (amplitude, frequency,
phase of a sinusoid family); a conditioning network produces per-layer FiLM
(gamma, beta) that modulate the hidden features of the main network. The
model, optimizer, DataLoader and a cosine scheduler go through
Accelerator.prepare(); backward and clipping go through the accelerator.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


class FiLMLayer(nn.Module):
    def __init__(self, dim, cond_dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.film = nn.Linear(cond_dim, 2 * dim)
        nn.init.zeros_(self.film.weight)
        nn.init.zeros_(self.film.bias)

    def forward(self, h, cond):
        gamma, beta = self.film(cond).chunk(2, -1)
        return F.silu((1 + gamma) * self.fc(h) + beta)


class FiLMNet(nn.Module):
    def __init__(self, hidden, n_layers, cond_dim=16):
        super().__init__()
        self.cond_encoder = nn.Sequential(nn.Linear(3, cond_dim), nn.SiLU(), nn.Linear(cond_dim, cond_dim))
        self.inp = nn.Linear(1, hidden)
        self.layers = nn.ModuleList([FiLMLayer(hidden, cond_dim) for _ in range(n_layers)])
        self.out = nn.Linear(hidden, 1)

    def forward(self, x, task):
        cond = self.cond_encoder(task)
        h = self.inp(x)
        for layer in self.layers:
            h = layer(h, cond)
        return self.out(h)


def build_dataset(seed, n):
    g = torch.Generator().manual_seed(seed)
    task = torch.stack([0.5 + torch.rand(n, generator=g), 0.5 + torch.rand(n, generator=g),
                        2 * math.pi * torch.rand(n, generator=g)], 1)
    x = torch.rand(n, 1, generator=g) * 4 - 2
    y = task[:, :1] * torch.sin(task[:, 1:2] * x + task[:, 2:3])
    return TensorDataset(x, task, y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--layers", type=int, default=3)
    args = ap.parse_args()

    accelerator = Accelerator(cpu=True)
    torch.manual_seed(args.seed)
    dataset = build_dataset(args.seed + 40, 256)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed))
    model = FiLMNet(args.hidden, args.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, args.steps))
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    model.train()
    step = 0
    while step < args.steps:
        for x, task, y in loader:
            loss = F.mse_loss(model(x, task), y)
            optimizer.zero_grad()
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            accelerator.print(f"step {step} loss {loss.item():.4f}")
            step += 1
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
