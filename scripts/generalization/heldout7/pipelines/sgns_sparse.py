"""Skip-gram with negative sampling on a synthetic topic corpus, using sparse embedding gradients.

Two optimisers: SparseAdam for the nn.Embedding(sparse=True) tables and Adam for the small dense
per-word bias vector. Centre/context pairs are sliced by hand from a pre-built pair tensor.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class SkipGram(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.center = nn.Embedding(vocab, dim, sparse=True)
        self.context = nn.Embedding(vocab, dim, sparse=True)
        self.ctx_bias = nn.Parameter(torch.zeros(vocab))
        nn.init.uniform_(self.center.weight, -0.5 / dim, 0.5 / dim)
        nn.init.zeros_(self.context.weight)

    def forward(self, c, pos, neg):
        vc = self.center(c)
        s_pos = (vc * self.context(pos)).sum(-1) + self.ctx_bias[pos]
        s_neg = torch.bmm(self.context(neg), vc.unsqueeze(-1)).squeeze(-1) + self.ctx_bias[neg]
        return -(F.logsigmoid(s_pos) + F.logsigmoid(-s_neg).sum(-1)).mean()


def topic_corpus(gen, vocab, n_docs, doc_len, n_topics=5):
    words_per_topic = vocab // n_topics
    topic = torch.randint(0, n_topics, (n_docs, 1), generator=gen)
    w = topic * words_per_topic + torch.randint(0, words_per_topic, (n_docs, doc_len), generator=gen)
    return w


def make_pairs(docs, window):
    centers, contexts = [], []
    for off in range(1, window + 1):
        centers += [docs[:, :-off].flatten(), docs[:, off:].flatten()]
        contexts += [docs[:, off:].flatten(), docs[:, :-off].flatten()]
    return torch.cat(centers), torch.cat(contexts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--negatives", type=int, default=5)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    vocab = 100
    docs = topic_corpus(gen, vocab, 200, 12)
    centers, contexts = make_pairs(docs, window=2)
    perm = torch.randperm(len(centers), generator=gen)
    centers, contexts = centers[perm], contexts[perm]
    freq = torch.bincount(docs.flatten(), minlength=vocab).float().pow(0.75)

    model = SkipGram(vocab, args.dim)
    sparse_opt = torch.optim.SparseAdam(list(model.center.parameters()) + list(model.context.parameters()),
                                        lr=args.lr)
    dense_opt = torch.optim.Adam([model.ctx_bias], lr=args.lr)
    for step in range(args.steps):
        sl = slice(step * args.batch_size, (step + 1) * args.batch_size)
        c, pos = centers[sl], contexts[sl]
        neg = torch.multinomial(freq, len(c) * args.negatives, replacement=True, generator=gen).view(len(c), -1)
        loss = model(c, pos, neg)
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
        print(f"step {step} loss {loss.item():.4f} grad_is_sparse {model.center.weight.grad.is_sparse}")


if __name__ == "__main__":
    main()
