"""Character-level-style LSTM on one long synthetic periodic token stream, trained with
truncated backprop through time: the hidden state is carried across chunks but detached.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class StreamLM(nn.Module):
    def __init__(self, vocab=12, emb=12, hidden=24):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True)
        self.proj = nn.Linear(hidden, vocab)

    def forward(self, tokens, state=None):
        out, state = self.lstm(self.emb(tokens), state)
        return self.proj(out), state


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--bptt", type=int, default=16)
    ap.add_argument("--streams", type=int, default=4)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    period = torch.randint(0, 12, (7,), generator=gen)
    total = args.bptt * args.steps + 1
    offsets = torch.randint(0, 7, (args.streams,), generator=gen)
    idx = (torch.arange(total)[None, :] + offsets[:, None]) % 7
    data = period[idx]
    flip = torch.rand(data.shape, generator=gen) < 0.05
    data = torch.where(flip, torch.randint(0, 12, data.shape, generator=gen), data)

    model = StreamLM()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    state = None
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        lo = step * args.bptt
        inp, tgt = data[:, lo : lo + args.bptt], data[:, lo + 1 : lo + args.bptt + 1]
        if state is not None:
            state = tuple(s.detach() for s in state)
        logits, state = model(inp, state)
        loss = F.cross_entropy(logits.reshape(-1, 12), tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    print(f"final loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
