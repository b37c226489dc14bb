"""Multi-kernel TextCNN sentiment classifier fed by a DataLoader with a custom collate_fn.

A map-style Dataset yields variable-length token lists (synthetic reviews
where a few "positive"/"negative" cue tokens decide the label). The custom
collate_fn pads to the longest sequence in the batch and builds a mask that is
used for masked max-over-time pooling. The DataLoader shuffles with a seeded
generator; training iterates over epochs until --steps optimizer steps.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

PAD = 0


class SyntheticReviews(Dataset):
    def __init__(self, n, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        self.items = []
        pos_cues, neg_cues = torch.arange(2, 6), torch.arange(6, 10)
        for _ in range(n):
            length = int(torch.randint(4, 20, (1,), generator=g))
            toks = torch.randint(10, vocab, (length,), generator=g)
            label = int(torch.randint(0, 2, (1,), generator=g))
            cues = pos_cues if label == 1 else neg_cues
            k = min(length, 2)
            where = torch.randperm(length, generator=g)[:k]
            toks[where] = cues[torch.randint(0, 4, (k,), generator=g)]
            self.items.append((toks.tolist(), label))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        return self.items[idx]


def pad_collate(batch, min_len=5):
    seqs, labels = zip(*batch, strict=False)
    max_len = max(min_len, max(len(s) for s in seqs))
    ids = torch.full((len(seqs), max_len), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
    return {"input_ids": ids, "mask": ids != PAD, "labels": torch.tensor(labels)}


class TextCNN(nn.Module):
    def __init__(self, vocab, emb=32, filters=16, kernel_sizes=(2, 3, 4), dropout=0.2):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.convs = nn.ModuleList([nn.Conv1d(emb, filters, k) for k in kernel_sizes])
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(filters * len(kernel_sizes), 2)

    def forward(self, ids, mask):
        x = self.embed(ids).transpose(1, 2)  # (B, E, T)
        pooled = []
        for conv in self.convs:
            h = F.relu(conv(x))
            k = conv.kernel_size[0]
            # a window is valid if its last token is a real token
            valid = mask[:, k - 1:].unsqueeze(1)
            pooled.append(h.masked_fill(~valid, float("-inf")).max(-1).values)
        return self.fc(self.dropout(torch.cat(pooled, -1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--emb", type=int, default=32)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    vocab = 60
    dataset = SyntheticReviews(80, vocab, seed=args.seed + 1)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, collate_fn=pad_collate,
                        generator=torch.Generator().manual_seed(args.seed), drop_last=True)
    model = TextCNN(vocab, emb=args.emb)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    step, epoch = 0, 0
    while step < args.steps:
        for batch in loader:
            logits = model(batch["input_ids"], batch["mask"])
            loss = F.cross_entropy(logits, batch["labels"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} step {step} loss {loss.item():.4f} padded_len {batch['input_ids'].shape[1]}")
            step += 1
            if step >= args.steps:
                break
        epoch += 1


if __name__ == "__main__":
    main()
