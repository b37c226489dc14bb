"""Inference-only batch decoding with an attention seq2seq model (no training).

A GRU encoder / GRU decoder with additive (Bahdanau) attention is restored
from an in-memory checkpoint and used to greedily decode batches of synthetic
source sequences (the task would be sequence reversal). Runs under
torch.inference_mode in eval mode; --steps is the number of batches decoded
(there are no optimizer steps). Reports token accuracy and mean attention
entropy per batch.
"""
import argparse
import io

import torch
import torch.nn as nn

BOS, EOS, PAD = 1, 2, 0


class Encoder(nn.Module):
    def __init__(self, vocab, emb, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.rnn = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * hidden, hidden)

    def forward(self, src):
        out, h = self.rnn(self.embed(src))
        return out, torch.tanh(self.bridge(torch.cat([h[0], h[1]], -1)))


class AdditiveAttention(nn.Module):
    def __init__(self, enc_dim, dec_dim, attn_dim):
        super().__init__()
        self.W_enc = nn.Linear(enc_dim, attn_dim, bias=False)
        self.W_dec = nn.Linear(dec_dim, attn_dim)
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def forward(self, dec_h, enc_out, src_mask):
        scores = self.v(torch.tanh(self.W_enc(enc_out) + self.W_dec(dec_h).unsqueeze(1))).squeeze(-1)
        weights = scores.masked_fill(~src_mask, float("-inf")).softmax(-1)
        return (weights.unsqueeze(-1) * enc_out).sum(1), weights


class Decoder(nn.Module):
    def __init__(self, vocab, emb, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.attn = AdditiveAttention(2 * hidden, hidden, hidden)
        self.cell = nn.GRUCell(emb + 2 * hidden, hidden)
        self.out = nn.Linear(hidden + 2 * hidden, vocab)

    def step(self, token, h, enc_out, src_mask):
        ctx, w = self.attn(h, enc_out, src_mask)
        h = self.cell(torch.cat([self.embed(token), ctx], -1), h)
        return self.out(torch.cat([h, ctx], -1)), h, w


class Seq2Seq(nn.Module):
    def __init__(self, vocab=24, emb=16, hidden=32):
        super().__init__()
        self.encoder = Encoder(vocab, emb, hidden)
        self.decoder = Decoder(vocab, emb, hidden)

    def greedy_decode(self, src, max_len):
        src_mask = src != PAD
        enc_out, h = self.encoder(src)
        token = torch.full((src.shape[0],), BOS, dtype=torch.long)
        outputs, attn = [], []
        for _ in range(max_len):
            logits, h, w = self.decoder.step(token, h, enc_out, src_mask)
            token = logits.argmax(-1)
            outputs.append(token)
            attn.append(w)
        return torch.stack(outputs, 1), torch.stack(attn, 1)


def make_batch(gen, batch_size, vocab, max_len):
    lengths = torch.randint(3, max_len + 1, (batch_size,), generator=gen)
    src = torch.randint(3, vocab, (batch_size, max_len), generator=gen)
    mask = torch.arange(max_len)[None, :] < lengths[:, None]
    src = src * mask
    tgt = torch.stack([torch.cat([s[:n].flip(0), torch.full((max_len - n,), PAD)]) for s, n in zip(src, lengths, strict=False)])
    return src, tgt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8, help="number of batches to decode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=8)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    vocab = 24
    ckpt = io.BytesIO()
    torch.save({"model": Seq2Seq(vocab, 16, args.hidden).state_dict(), "vocab": vocab}, ckpt)
    ckpt.seek(0)

    state = torch.load(ckpt, weights_only=True)
    model = Seq2Seq(state["vocab"], 16, args.hidden)
    model.load_state_dict(state["model"])
    model.eval()

    gen = torch.Generator().manual_seed(args.seed + 13)
    with torch.inference_mode():
        for step in range(args.steps):
            src, tgt = make_batch(gen, args.batch_size, vocab, args.max_len)
            pred, attn = model.greedy_decode(src, args.max_len)
            valid = tgt != PAD
            acc = ((pred == tgt) & valid).sum().item() / valid.sum().item()
            entropy = -(attn.clamp_min(1e-9).log() * attn).sum(-1).mean().item()
            print(f"batch {step} token-acc {acc:.3f} attn-entropy {entropy:.3f}")


if __name__ == "__main__":
    main()
