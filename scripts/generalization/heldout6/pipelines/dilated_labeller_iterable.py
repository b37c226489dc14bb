"""Per-token sequence labeller built from dilated 1-D convolutions, fed by an IterableDataset with a
worker_init_fn; Adamax with clip_grad_value_."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class TaggedStream(IterableDataset):
    def __init__(self, seed, vocab, length):
        self.seed, self.vocab, self.length = seed, vocab, length
        self.gen = None

    def __iter__(self):
        if self.gen is None:
            self.gen = torch.Generator().manual_seed(self.seed)
        while True:
            tokens = torch.randint(0, self.vocab, (self.length,), generator=self.gen)
            prev = torch.cat([tokens[:1], tokens[:-1]])
            tags = ((tokens + prev) % 3)
            yield tokens, tags


def worker_init_fn(worker_id):
    info = get_worker_info()
    ds = info.dataset
    ds.gen = torch.Generator().manual_seed(ds.seed * 1000 + worker_id)


class DilatedTagger(nn.Module):
    def __init__(self, vocab, dim, n_tags, dilations=(1, 2, 4)):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.convs = nn.ModuleList(nn.Conv1d(dim, dim, 3, padding=d, dilation=d) for d in dilations)
        self.out = nn.Linear(dim, n_tags)

    def forward(self, tokens):
        h = self.embed(tokens).transpose(1, 2)
        for conv in self.convs:
            h = h + F.gelu(conv(h))
        return self.out(h.transpose(1, 2))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--clip", type=float, default=0.1)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    loader = DataLoader(TaggedStream(args.seed, 15, 20), batch_size=args.batch_size, num_workers=0,
                        worker_init_fn=worker_init_fn)
    model = DilatedTagger(15, args.dim, 3)
    opt = torch.optim.Adamax(model.parameters(), lr=args.lr)
    for step, (tokens, tags) in enumerate(loader):
        if step >= args.steps:
            break
        loss = F.cross_entropy(model(tokens).reshape(-1, 3), tags.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), args.clip)
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
