"""FT-Transformer-style tabular regressor (per-feature tokens + [CLS]) trained with HF Accelerate on CPU.

Accelerator(cpu=True, gradient_accumulation_steps=K): the optimizer only really steps every K
micro-batches (accelerator.sync_gradients); ``--steps`` counts those real updates.
clip_grad_norm_ is applied on sync steps with a loose max-norm; CosineAnnealingWarmRestarts schedule.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


class FeatureTokenizer(nn.Module):
    def __init__(self, n_num, d):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_num, d) * 0.1)
        self.bias = nn.Parameter(torch.zeros(n_num, d))
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.1)

    def forward(self, x):
        tok = x.unsqueeze(-1) * self.weight + self.bias
        return torch.cat([self.cls.expand(x.shape[0], -1, -1), tok], 1)


class FTTransformer(nn.Module):
    def __init__(self, n_num, d=24, depth=2):
        super().__init__()
        self.tokenizer = FeatureTokenizer(n_num, d)
        enc = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.transformer = nn.TransformerEncoder(enc, depth, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(d), nn.ReLU(), nn.Linear(d, 1))

    def forward(self, x):
        return self.head(self.transformer(self.tokenizer(x))[:, 0]).squeeze(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--accum", type=int, default=3)
    ap.add_argument("--d-token", type=int, default=24)
    args = ap.parse_args()

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=args.accum)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    X = torch.randn(600, 7, generator=gen)
    y = X[:, 0] * X[:, 1] + torch.sin(X[:, 2]) - X[:, 3].abs() + 0.1 * torch.randn(600, generator=gen)
    loader = DataLoader(TensorDataset(X, y), batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed))
    model = FTTransformer(7, args.d_token)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-5)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=5, eta_min=1e-5)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    updates = 0
    model.train()
    while updates < args.steps:
        for xb, yb in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.huber_loss(model(xb), yb)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    gnorm = accelerator.clip_grad_norm_(model.parameters(), 10.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                accelerator.print(f"update {updates} loss {loss.item():.4f} grad_norm {float(gnorm):.3f}")
                updates += 1
                if updates >= args.steps:
                    break


if __name__ == "__main__":
    main()
