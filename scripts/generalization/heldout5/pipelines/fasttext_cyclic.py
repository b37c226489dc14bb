"""fastText-style bag-of-ngrams text classifier (EmbeddingBag with offsets) trained with SGD momentum and CyclicLR on synthetic token streams."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class FastText(nn.Module):
    def __init__(self, vocab, dim, n_classes):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.fc = nn.Linear(dim, n_classes)

    def forward(self, flat_tokens, offsets):
        return self.fc(self.bag(flat_tokens, offsets))


def make_batch(batch_size, vocab, n_classes, g):
    labels = torch.randint(0, n_classes, (batch_size,), generator=g)
    docs, offsets, pos = [], [], 0
    for label in labels.tolist():
        length = int(torch.randint(4, 12, (1,), generator=g))
        toks = torch.randint(0, vocab, (length,), generator=g)
        toks[: length // 2] = label * (vocab // n_classes) + toks[: length // 2] % (vocab // n_classes)
        docs.append(toks)
        offsets.append(pos)
        pos += length
    return torch.cat(docs), torch.tensor(offsets), labels


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--dim", type=int, default=16)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    vocab, n_classes = 120, 4
    model = FastText(vocab, args.dim, n_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CyclicLR(optimizer, base_lr=args.lr / 10, max_lr=args.lr, step_size_up=3)
    g = torch.Generator().manual_seed(args.seed)
    for step in range(args.steps):
        tokens, offsets, labels = make_batch(args.batch_size, vocab, n_classes, g)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(tokens, offsets), labels)
        loss.backward()
        optimizer.step()
        scheduler.step()
        print(f"step {step} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.3f}")


if __name__ == "__main__":
    main()
