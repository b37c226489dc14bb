"""GRU encoder-decoder with additive attention learning to reverse digit sequences; teacher forcing,
Adam + ReduceLROnPlateau on validation loss, epoch-style loop with periodic evaluation."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS = 0, 1


class Encoder(nn.Module):
    def __init__(self, vocab, emb, hid, p):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.emb_dropout = nn.Dropout(p)
        self.rnn = nn.GRU(emb, hid, batch_first=True)

    def forward(self, src):
        return self.rnn(self.emb_dropout(self.embedding(src)))


class Decoder(nn.Module):
    def __init__(self, vocab, emb, hid, p):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.attn = nn.Linear(2 * hid, hid)
        self.v = nn.Linear(hid, 1, bias=False)
        self.rnn = nn.GRU(emb + hid, hid, batch_first=True)
        self.dropout = nn.Dropout(p)
        self.out = nn.Linear(2 * hid, vocab)

    def step(self, tok, hidden, enc_out):
        e = self.embedding(tok).unsqueeze(1)
        q = hidden[-1].unsqueeze(1).expand_as(enc_out)
        scores = self.v(torch.tanh(self.attn(torch.cat([q, enc_out], -1)))).squeeze(-1)
        ctx = (F.softmax(scores, -1).unsqueeze(-1) * enc_out).sum(1, keepdim=True)
        o, hidden = self.rnn(torch.cat([e, ctx], -1), hidden)
        logits = self.out(self.dropout(torch.cat([o, ctx], -1))).squeeze(1)
        return logits, hidden


class Seq2Seq(nn.Module):
    def __init__(self, vocab, emb, hid, p):
        super().__init__()
        self.encoder = Encoder(vocab, emb, hid, p)
        self.decoder = Decoder(vocab, emb, hid, p)

    def forward(self, src, tgt):
        enc_out, hidden = self.encoder(src)
        tok = torch.full((src.size(0),), BOS, dtype=torch.long)
        outs = []
        for t in range(tgt.size(1)):
            logits, hidden = self.decoder.step(tok, hidden, enc_out)
            outs.append(logits)
            tok = tgt[:, t]  # teacher forcing
        return torch.stack(outs, 1)


def batches(gen, bs, length, vocab, n):
    for _ in range(n):
        src = torch.randint(2, vocab, (bs, length), generator=gen)
        yield src, src.flip(1)


def evaluate(model, val):
    model.eval()
    tot = 0.0
    with torch.no_grad():
        for src, tgt in val:
            logits = model(src, tgt)
            tot += F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1)).item()
    return tot / len(val)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=6)
    ap.add_argument("--eval-every", type=int, default=3)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--batches-per-epoch", type=int, default=100)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 5)
    vocab = 12
    model = Seq2Seq(vocab, 16, 32, args.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=1)
    val = list(batches(gen, 32, args.seq_len, vocab, 2))
    restore_mode = args.bug != "dropout-in-eval"
    global_step, epoch = 0, 0
    while global_step < args.steps:
        model.train()
        for src, tgt in batches(gen, args.batch_size, args.seq_len, vocab, args.batches_per_epoch):
            logits = model(src, tgt)
            loss = F.cross_entropy(logits.reshape(-1, vocab), tgt.reshape(-1), ignore_index=PAD)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            print(f"epoch {epoch} step {global_step} loss {loss.item():.4f}")
            global_step += 1
            if global_step % args.eval_every == 0:
                vl = evaluate(model, val)
                plateau.step(vl)
                print(f"  val_loss {vl:.4f}")
                if restore_mode:
                    model.train()
            if global_step >= args.steps:
                break
        epoch += 1


if __name__ == "__main__":
    main()
