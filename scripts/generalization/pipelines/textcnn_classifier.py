"""Trains a Kim-style TextCNN (embedding, parallel Conv1d filters of widths 2/3/4, max-pool) on synthetic
token sequences with AdamW, evaluating on a held-out split every --eval-every steps. Bug `dropout-in-eval`:
the classifier head hard-codes F.dropout(..., training=True), so dropout stays active during evaluation."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class DropoutHead(nn.Module):
    def __init__(self, d_in, n_classes, p=0.3, always_drop=False):
        super().__init__()
        self.p = p
        self.always_drop = always_drop
        self.proj = nn.Linear(d_in, n_classes)

    def forward(self, h):
        if self.always_drop:
            h = F.dropout(h, self.p, training=True)
        else:
            h = F.dropout(h, self.p, training=self.training)
        return self.proj(h)


class TextCNN(nn.Module):
    def __init__(self, vocab, emb_dim, n_filters, widths, n_classes, always_drop=False):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb_dim, padding_idx=0)
        self.convs = nn.ModuleList([nn.Conv1d(emb_dim, n_filters, w) for w in widths])
        self.head = DropoutHead(n_filters * len(widths), n_classes, always_drop=always_drop)

    def forward(self, tokens):
        e = self.embedding(tokens).transpose(1, 2)
        pooled = [F.relu(conv(e)).amax(-1) for conv in self.convs]
        return self.head(torch.cat(pooled, dim=1))


def make_corpus(gen, n, vocab, seq_len):
    tokens = torch.randint(1, vocab, (n, seq_len), generator=gen)
    labels = torch.randint(0, 3, (n,), generator=gen)
    # plant a class-specific bigram somewhere in each sequence
    pos = torch.randint(0, seq_len - 1, (n,), generator=gen)
    rows = torch.arange(n)
    tokens[rows, pos] = 2 + 2 * labels
    tokens[rows, pos + 1] = 3 + 2 * labels
    return tokens, labels


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total, correct, count = 0.0, 0, 0
    for tokens, labels in loader:
        logits = model(tokens)
        total += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
        count += len(labels)
    model.train()
    return total / count, correct / count


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=2)
    p.add_argument("--bug", choices=["none", "dropout-in-eval"], default="none")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    vocab, seq_len = 40, 20
    tokens, labels = make_corpus(torch.Generator().manual_seed(args.seed), 480, vocab, seq_len)
    train_ds = TensorDataset(tokens[:384], labels[:384])
    val_ds = TensorDataset(tokens[384:], labels[384:])
    train_loader = DataLoader(train_ds, batch_size=args.batch_size, shuffle=True,
                              generator=torch.Generator().manual_seed(args.seed))
    val_loader = DataLoader(val_ds, batch_size=48)

    model = TextCNN(vocab, 16, 8, (2, 3, 4), 3, always_drop=(args.bug == "dropout-in-eval"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    step = 0
    loss = torch.tensor(float("nan"))
    model.train()
    while step < args.steps:
        for tok, lab in train_loader:
            loss = F.cross_entropy(model(tok), lab)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if (step + 1) % args.eval_every == 0:
                val_loss, val_acc = evaluate(model, val_loader)
                print(f"step {step} val loss {val_loss:.4f} acc {val_acc:.3f}")
            step += 1
            if step >= args.steps:
                break

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
