"""Trains a GRU encoder-decoder (teacher forcing) to reverse short digit strings, accumulating
gradients over 4 micro-batches per optimizer step (loss divided by the accumulation count).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

PAD, BOS, N_DIGITS = 0, 1, 10
VOCAB = N_DIGITS + 2


class Seq2Seq(nn.Module):
    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.src_embed = nn.Embedding(VOCAB, dim)
        self.tgt_embed = nn.Embedding(VOCAB, dim)
        self.encoder = nn.GRU(dim, dim, batch_first=True)
        self.decoder = nn.GRU(dim, dim, batch_first=True)
        self.generator = nn.Linear(dim, VOCAB)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        _, h = self.encoder(self.src_embed(src))
        out, _ = self.decoder(self.tgt_embed(tgt_in), h)
        return self.generator(out)


def reverse_batch(n: int, length: int, gen: torch.Generator):
    src = torch.randint(2, VOCAB, (n, length), generator=gen)
    tgt = src.flip(1)
    tgt_in = torch.cat([torch.full((n, 1), BOS), tgt[:, :-1]], dim=1)
    return src, tgt_in, tgt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=4e-3)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--accum-steps", type=int, default=4)
    parser.add_argument("--length", type=int, default=7)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = Seq2Seq()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    optimizer.zero_grad()
    step, micro, step_loss = 0, 0, 0.0
    while step < args.steps:
        src, tgt_in, tgt = reverse_batch(args.micro_batch, args.length, gen)
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1), ignore_index=PAD)
        (loss / args.accum_steps).backward()
        step_loss += loss.item() / args.accum_steps
        micro += 1
        if micro % args.accum_steps == 0:
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            print(f"step {step} loss {step_loss:.4f}")
            last_loss, step_loss = step_loss, 0.0
            step += 1

    print(f"final loss {last_loss:.6f}")


if __name__ == "__main__":
    main()
