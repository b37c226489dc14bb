"""Trains a one-layer GRU language model on a synthetic Markov-chain token stream with truncated BPTT:
the stream is batchified into columns and windows are sliced by hand (no DataLoader), the hidden state is
carried over and detached between windows, and gradients are clipped with clip_grad_norm_."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class GRULanguageModel(nn.Module):
    def __init__(self, vocab, emb_dim, hidden):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb_dim)
        self.rnn = nn.GRU(emb_dim, hidden, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens, h=None):
        out, h = self.rnn(self.embedding(tokens), h)
        return self.decoder(out), h


def markov_stream(gen, vocab, length):
    logits = torch.randn(vocab, vocab, generator=gen) * 2.5
    probs = torch.softmax(logits, dim=-1)
    stream = torch.empty(length, dtype=torch.long)
    tok = 0
    for i in range(length):
        tok = torch.multinomial(probs[tok], 1, generator=gen).item()
        stream[i] = tok
    return stream


def batchify(stream, batch_size):
    n = stream.numel() // batch_size
    return stream[: n * batch_size].view(batch_size, n)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--bptt", type=int, default=16)
    p.add_argument("--clip", type=float, default=0.5)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    vocab = 24
    stream = markov_stream(torch.Generator().manual_seed(args.seed), vocab, 2048)
    data = batchify(stream, args.batch_size)

    model = GRULanguageModel(vocab, 16, 48)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    hidden = None
    pos = 0
    model.train()
    for _step in range(args.steps):
        if pos + args.bptt + 1 > data.size(1):
            pos, hidden = 0, None
        inputs = data[:, pos:pos + args.bptt]
        targets = data[:, pos + 1:pos + 1 + args.bptt]
        pos += args.bptt
        if hidden is not None:
            hidden = hidden.detach()
        logits, hidden = model(inputs, hidden)
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
