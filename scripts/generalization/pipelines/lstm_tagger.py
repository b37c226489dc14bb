"""Trains a bidirectional LSTM sequence tagger on variable-length synthetic sentences, padded by a
DataLoader collate_fn and packed with pack_padded_sequence; per-token cross-entropy ignores padding.
Optimised with RMSprop and a StepLR schedule."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

PAD = 0
IGNORE = -100


class TaggingDataset(Dataset):
    def __init__(self, seed, n, vocab, n_tags, min_len=4, max_len=14):
        gen = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(n):
            length = int(torch.randint(min_len, max_len + 1, (1,), generator=gen))
            tokens = torch.randint(1, vocab, (length,), generator=gen)
            prev = torch.cat([torch.zeros(1, dtype=torch.long), tokens[:-1]])
            tags = (tokens + prev) % n_tags  # tag depends on the token and its left neighbour
            self.items.append((tokens, tags))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate(batch):
    tokens, tags = zip(*batch, strict=False)
    lengths = torch.tensor([len(t) for t in tokens])
    return (pad_sequence(tokens, batch_first=True, padding_value=PAD),
            pad_sequence(tags, batch_first=True, padding_value=IGNORE),
            lengths)


class BiLSTMTagger(nn.Module):
    def __init__(self, vocab, emb_dim, hidden, n_tags):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb_dim, padding_idx=PAD)
        self.lstm = nn.LSTM(emb_dim, hidden, batch_first=True, bidirectional=True)
        self.proj = nn.Linear(2 * hidden, n_tags)

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(self.embed(tokens), lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.size(1))
        return self.proj(out)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=16)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    vocab, n_tags = 30, 4
    dataset = TaggingDataset(args.seed, 256, vocab, n_tags)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, collate_fn=collate,
                        generator=torch.Generator().manual_seed(args.seed))

    model = BiLSTMTagger(vocab, 16, 24, n_tags)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=args.lr, alpha=0.95)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)

    step = 0
    loss = torch.tensor(float("nan"))
    model.train()
    while step < args.steps:
        for tokens, tags, lengths in loader:
            logits = model(tokens, lengths)
            loss = F.cross_entropy(logits.reshape(-1, n_tags), tags.reshape(-1), ignore_index=IGNORE)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step >= args.steps:
                break

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
