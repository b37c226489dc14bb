"""Trains a bidirectional LSTM classifier on variable-length synthetic sensor sequences using
pack_padded_sequence (unsorted lengths); the label is which input channel carries a drift.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

N_FEATURES, N_CLASSES = 6, 3


class SeqClassifier(nn.Module):
    def __init__(self, n_in: int = N_FEATURES, hidden: int = 24, n_classes: int = N_CLASSES):
        super().__init__()
        self.inp = nn.Linear(n_in, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=2, batch_first=True, bidirectional=True,
                            dropout=0.1)
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh(),
                                  nn.Linear(hidden, n_classes))

    def forward(self, padded: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.inp(padded))
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)
        last = torch.cat([h_n[-2], h_n[-1]], dim=-1)  # final layer, both directions
        return self.head(last)


def make_batch(batch_size: int, gen: torch.Generator):
    lengths = torch.randint(4, 21, (batch_size,), generator=gen)
    labels = torch.randint(0, N_CLASSES, (batch_size,), generator=gen)
    seqs = []
    for length, label in zip(lengths.tolist(), labels.tolist(), strict=True):
        seq = 0.5 * torch.randn(length, N_FEATURES, generator=gen)
        seq[:, label] += torch.linspace(0.0, 1.5, length)
        seqs.append(seq)
    return pad_sequence(seqs, batch_first=True), lengths, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = SeqClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        padded, lengths, labels = make_batch(args.batch_size, gen)
        loss = F.cross_entropy(model(padded, lengths), labels)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
