"""Character-level CNN + highway language model (next-char prediction) trained under bf16 CPU autocast."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Highway(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.transform = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, dim)
        nn.init.constant_(self.gate.bias, -1.0)

    def forward(self, x):
        t = torch.sigmoid(self.gate(x))
        return t * F.relu(self.transform(x)) + (1 - t) * x


class CharCNNHighwayLM(nn.Module):
    def __init__(self, vocab, emb, channels, widths=(2, 3, 4), n_highway=2, fp32_highway=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.widths = widths
        self.convs = nn.ModuleList(nn.Conv1d(emb, channels, w) for w in widths)
        dim = channels * len(widths)
        self.highway = nn.ModuleList(Highway(dim) for _ in range(n_highway))
        self.head = nn.Linear(dim, vocab)
        self.fp32_highway = fp32_highway

    def _run_highway(self, h):
        if self.fp32_highway:
            # keep the gating numerically stable
            with torch.autocast("cpu", enabled=False):
                h = h.float()
                for layer in self.highway:
                    h = layer(h)
            return h
        for layer in self.highway:
            h = layer(h)
        return h

    def forward(self, tokens):
        x = self.embed(tokens).transpose(1, 2)
        feats = [F.relu(conv(F.pad(x, (w - 1, 0)))) for conv, w in zip(self.convs, self.widths, strict=True)]
        h = torch.cat(feats, dim=1).transpose(1, 2)
        return self.head(self._run_highway(h))


def make_corpus(gen, n_chars, vocab):
    base = torch.randint(0, vocab, (32,), generator=gen)
    reps = base.repeat(n_chars // 32 + 1)[:n_chars]
    flip = torch.rand(n_chars, generator=gen) < 0.1
    return torch.where(flip, torch.randint(0, vocab, (n_chars,), generator=gen), reps)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=24)
    p.add_argument("--bug", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    vocab = 27
    corpus = make_corpus(gen, 4096, vocab)
    model = CharCNNHighwayLM(vocab, 16, 8, fp32_highway=args.bug == "autocast-escape")
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        starts = torch.randint(0, corpus.numel() - args.seq_len - 1, (args.batch_size,), generator=gen)
        batch = torch.stack([corpus[s:s + args.seq_len + 1] for s in starts.tolist()])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
