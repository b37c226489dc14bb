"""Bag-of-n-grams topic classifier with Stochastic Weight Averaging (SWA).

Documents are bags of hashed token ids (EmbeddingBag, mean mode, with
per-sample offsets). A BatchNorm'd MLP sits on top. After --swa-start steps
the weights are averaged with torch.optim.swa_utils.AveragedModel while SWALR
anneals the learning rate; at the end update_bn recomputes the BatchNorm
statistics for the averaged model, which is then evaluated.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

N_TOPICS = 3


def make_docs(gen, n_docs, vocab):
    labels = torch.randint(0, N_TOPICS, (n_docs,), generator=gen)
    tokens, offsets, pos = [], [], 0
    band = vocab // N_TOPICS
    for y in labels.tolist():
        length = int(torch.randint(5, 15, (1,), generator=gen))
        topical = torch.randint(y * band, (y + 1) * band, (length // 2,), generator=gen)
        noise = torch.randint(0, vocab, (length - length // 2,), generator=gen)
        offsets.append(pos)
        tokens.append(torch.cat([topical, noise]))
        pos += length
    return torch.cat(tokens), torch.tensor(offsets), labels


class BagClassifier(nn.Module):
    def __init__(self, vocab, emb, hidden):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, emb, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(emb, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                 nn.Linear(hidden, N_TOPICS))

    def forward(self, batch):
        tokens, offsets = batch
        return self.mlp(self.bag(tokens, offsets))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--swa-lr", type=float, default=0.05)
    ap.add_argument("--swa-start", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=32)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 66)
    vocab = 90
    model = BagClassifier(vocab, 16, args.hidden)
    swa_model = AveragedModel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True)
    swa_scheduler = SWALR(optimizer, swa_lr=args.swa_lr, anneal_epochs=2, anneal_strategy="cos")

    model.train()
    for step in range(args.steps):
        tokens, offsets, labels = make_docs(gen, args.batch_size, vocab)
        loss = F.cross_entropy(model((tokens, offsets)), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step >= args.swa_start:
            swa_model.update_parameters(model)
            swa_scheduler.step()
        print(f"step {step} loss {loss.item():.4f} lr {optimizer.param_groups[0]['lr']:.4f}")

    bn_batches = [make_docs(gen, args.batch_size, vocab) for _ in range(3)]
    # update_bn unpacks input[0] from list/tuple batches, so nest the (tokens, offsets) pair
    update_bn([((t, o),) for t, o, _ in bn_batches], swa_model)
    tokens, offsets, labels = make_docs(gen, 64, vocab)
    swa_model.eval()
    with torch.no_grad():
        acc = (swa_model((tokens, offsets)).argmax(-1) == labels).float().mean().item()
    print(f"swa model averaged {int(swa_model.n_averaged)} checkpoints, eval acc {acc:.2f}")


if __name__ == "__main__":
    main()
