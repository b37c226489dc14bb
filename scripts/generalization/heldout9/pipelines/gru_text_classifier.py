"""Bag-of-sentiment-words toy corpus -> GRU sentence classifier with periodic validation."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, PAD = 60, 0
POS_WORDS = torch.arange(1, 9)
NEG_WORDS = torch.arange(9, 17)


def make_corpus(g, n, max_len=18):
    lengths = torch.randint(6, max_len + 1, (n,), generator=g)
    toks = torch.randint(17, VOCAB, (n, max_len), generator=g)
    n_pos = torch.randint(0, 4, (n,), generator=g)
    n_neg = torch.randint(0, 4, (n,), generator=g)
    for i in range(n):
        slots = torch.randperm(int(lengths[i]), generator=g)
        k = 0
        for _ in range(int(n_pos[i])):
            toks[i, slots[k]] = POS_WORDS[torch.randint(0, 8, (1,), generator=g)]
            k += 1
        for _ in range(int(n_neg[i])):
            toks[i, slots[k]] = NEG_WORDS[torch.randint(0, 8, (1,), generator=g)]
            k += 1
        toks[i, lengths[i]:] = PAD
    labels = (n_pos >= n_neg).long()
    return toks, lengths, labels


class ClassifierHead(nn.Module):
    def __init__(self, d, n_cls, p, functional_default=False):
        super().__init__()
        self.fc = nn.Linear(d, n_cls)
        self.p = p
        self.functional_default = functional_default

    def forward(self, h):
        if self.functional_default:
            h = F.dropout(h, p=self.p)
        else:
            h = F.dropout(h, p=self.p, training=self.training)
        return self.fc(h)


class GRUClassifier(nn.Module):
    def __init__(self, emb=32, hid=48, p=0.3, functional_default=False):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, emb, padding_idx=PAD)
        self.emb_drop = nn.Dropout(0.1)
        self.rnn = nn.GRU(emb, hid, batch_first=True)
        self.head = ClassifierHead(hid, 2, p, functional_default)

    def forward(self, toks, lengths):
        x = self.emb_drop(self.embed(toks))
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, h_n = self.rnn(packed)
        return self.head(h_n[-1])


def evaluate(model, data):
    model.eval()
    toks, lengths, labels = data
    with torch.no_grad():
        logits = model(toks, lengths)
    model.train()
    return F.cross_entropy(logits, labels).item(), (logits.argmax(1) == labels).float().mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    ap.add_argument("--clip", type=float, default=0.0)
    ap.add_argument("--eval-every", type=int, default=3)
    ap.add_argument("--bug", default="none")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 11)
    train = make_corpus(g, 512)
    valid = make_corpus(torch.Generator().manual_seed(99), 200)

    model = GRUClassifier(functional_default=(args.bug == "dropout-in-eval"))
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * 40, momentum=0.9)

    order = torch.randperm(512, generator=g)
    model.train()
    for step in range(args.steps):
        sel = order[step * args.batch_size % 512:][: args.batch_size]
        toks, lengths, labels = (t[sel] for t in train)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(toks, lengths), labels)
        loss.backward()
        if args.clip:
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        msg = f"step {step} loss {loss.item():.4f}"
        if args.eval_every and (step + 1) % args.eval_every == 0:
            vl, va = evaluate(model, valid)
            msg += f" | val_loss {vl:.4f} val_acc {va:.3f}"
        print(msg)

    vl, va = evaluate(model, valid)
    print(f"final val_loss {vl:.4f} val_acc {va:.4f}")


if __name__ == "__main__":
    main()
