"""BERT-style masked-token pretraining of a tiny nn.TransformerEncoder on synthetic "grammar" sequences.

AdamW with linear warmup/decay (LambdaLR), periodic held-out masked-LM accuracy, epoch loop
over a DataLoader with ``model.train()`` called at the start of each epoch.
"""
from __future__ import annotations

import argparse
import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

PAD, MASK = 0, 1


class MaskedLM(nn.Module):
    def __init__(self, vocab, d_model, n_layers, ctx, p_drop=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, ctx, d_model))
        self.emb_dropout = nn.Dropout(p_drop)
        layer = nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=2 * d_model, dropout=p_drop,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.to_vocab = nn.Linear(d_model, vocab)
        nn.init.normal_(self.pos, std=0.02)

    def forward(self, tokens):
        h = self.emb_dropout(self.embed(tokens) + self.pos[:, : tokens.shape[1]])
        return self.to_vocab(self.norm(self.encoder(h)))


def grammar_corpus(gen, n, ctx, vocab):
    """Sequences from a few repeating motifs so masked positions are predictable from context."""
    motifs = torch.randint(2, vocab, (6, 4), generator=gen)
    which = torch.randint(0, 6, (n, ctx // 4), generator=gen)
    seq = motifs[which].reshape(n, -1)
    noise = torch.rand(n, ctx, generator=gen) < 0.05
    return torch.where(noise, torch.randint(2, vocab, (n, ctx), generator=gen), seq)


def mask_tokens(tokens, gen, p=0.15):
    m = torch.rand(tokens.shape, generator=gen) < p
    inputs = tokens.masked_fill(m, MASK)
    labels = tokens.masked_fill(~m, -100)
    return inputs, labels


@torch.no_grad()
def evaluate(model, tokens, gen, keep_mode=True):
    prev_mode = model.training
    model.eval()
    inputs, labels = mask_tokens(tokens, gen)
    logits = model(inputs)
    sel = labels != -100
    acc = (logits.argmax(-1)[sel] == labels[sel]).float().mean().item()
    if keep_mode:
        model.train(prev_mode)
    return acc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bug", choices=["dropout-in-eval"], default=None)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    vocab, ctx = 20, 16
    data_gen = torch.Generator().manual_seed(args.seed)
    corpus = grammar_corpus(data_gen, 640, ctx, vocab)
    train_tok, val_tok = corpus[:512], corpus[512:]
    loader = DataLoader(TensorDataset(train_tok), batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed))
    mask_gen = torch.Generator().manual_seed(args.seed + 7)
    val_gen = torch.Generator().manual_seed(args.seed + 8)

    model = MaskedLM(vocab, args.d_model, n_layers=2, ctx=ctx)
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or n == "pos"]
    decay = [p for n, p in model.named_parameters() if not (p.ndim < 2 or n == "pos")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr)
    warm = max(1, args.steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else max(0.0, (args.steps - s) / max(1, args.steps - warm)))
    # eval helper was simplified to "just switch to eval" during a refactor
    restore_after_eval = args.bug != "dropout-in-eval"

    step, losses, modes = 0, [], []
    for epoch in itertools.count():
        model.train()
        for (tok,) in loader:
            inputs, labels = mask_tokens(tok, mask_gen)
            logits = model(inputs)
            loss = F.cross_entropy(logits.view(-1, vocab), labels.view(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            modes.append(model.training)
            if (step + 1) % args.eval_every == 0:
                acc = evaluate(model, val_tok, val_gen, keep_mode=restore_after_eval)
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} val_masked_acc {acc:.3f}")
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.save:
        torch.save({"state": model.state_dict(), "losses": losses, "extra": modes}, args.save)


if __name__ == "__main__":
    main()
