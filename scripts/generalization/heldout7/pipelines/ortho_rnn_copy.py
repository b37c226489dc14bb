"""Vanilla RNN with an orthogonally-parametrised recurrent matrix on the copy-memory task.

torch.nn.utils.parametrizations.orthogonal keeps W_hh orthogonal throughout training (the optimiser
updates the unconstrained original). RMSprop, gradient clipping by value, ReduceLROnPlateau on the
training loss, and an explicit epoch-of-hand-sliced-batches loop.
"""
from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.nn.utils import parametrizations


class OrthoRNN(nn.Module):
    def __init__(self, n_sym, hidden):
        super().__init__()
        self.embed = nn.Embedding(n_sym + 2, hidden)
        self.cell = nn.RNNCell(hidden, hidden, nonlinearity="tanh")
        parametrizations.orthogonal(self.cell, "weight_hh")
        self.readout = nn.Linear(hidden, n_sym + 1)

    def forward(self, seq):
        h = torch.zeros(seq.shape[0], self.cell.hidden_size)
        outs = []
        for t in range(seq.shape[1]):
            h = self.cell(self.embed(seq[:, t]), h)
            outs.append(self.readout(h))
        return torch.stack(outs, 1)


def copy_task(gen, n, n_sym=6, mem=4, delay=8):
    blank, marker = n_sym, n_sym + 1
    payload = torch.randint(0, n_sym, (n, mem), generator=gen)
    inp = torch.full((n, mem + delay + mem), blank)
    inp[:, :mem] = payload
    inp[:, mem + delay - 1] = marker
    target = torch.full_like(inp, blank)
    target[:, -mem:] = payload
    return inp, target


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=32)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    inp, tgt = copy_task(gen, 256)
    net = OrthoRNN(6, args.hidden)
    opt = torch.optim.RMSprop(net.parameters(), lr=args.lr)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=2)
    n_batches = len(inp) // args.batch_size
    step = 0
    while step < args.steps:
        order = torch.randperm(len(inp), generator=gen)
        for b in range(n_batches):
            sel = order[b * args.batch_size:(b + 1) * args.batch_size]
            logits = net(inp[sel])
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[sel].reshape(-1))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_value_(net.parameters(), 1.0)
            opt.step()
            plateau.step(loss.item())
            w = net.cell.weight_hh
            ortho_err = (w @ w.t() - torch.eye(w.shape[0])).abs().max().item()
            print(f"step {step} loss {loss.item():.4f} ortho_err {ortho_err:.1e}")
            step += 1
            if step == args.steps:
                break


if __name__ == "__main__":
    main()
