"""A tiny GPT trained the way nanoGPT's ``train.py`` trains one: the model builds its own AdamW
(``configure_optimizers``, decay and no-decay param groups), the lr is set by hand every
iteration (linear warm-up, cosine decay, then ``min_lr`` for good), grads are clipped, and the
model is evaluated every few iterations. Seeded random tokens; options select the clean
variants and the bugs the tests need."""

import argparse
import json
import math

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, CONTEXT = 32, 8


class Block(nn.Module):
    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, 2, dropout=dropout, batch_first=True)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width),
                                 nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln_1(x)
        mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), diagonal=1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, width: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(VOCAB, width),
            "wpe": nn.Embedding(CONTEXT, width),
            "drop": nn.Dropout(dropout),
            "h": nn.ModuleList([Block(width, dropout) for _ in range(layers)]),
            "ln_f": nn.LayerNorm(width),
        })
        self.lm_head = nn.Linear(width, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1])
        x = self.transformer["drop"](self.transformer["wte"](idx) + self.transformer["wpe"](pos))
        for block in self.transformer["h"]:
            x = block(x)
        return self.lm_head(self.transformer["ln_f"](x))

    def configure_optimizers(self, lr: float, weight_decay: float, only_blocks: bool) -> torch.optim.AdamW:
        named = {n: p for n, p in self.named_parameters() if p.requires_grad}
        if only_blocks:  # the bug: a refactor keeps only the transformer blocks
            named = {n: p for n, p in named.items() if n.startswith("transformer.h.")}
        decay = [p for p in named.values() if p.dim() >= 2]
        no_decay = [p for p in named.values() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


def get_lr(it: int, args: argparse.Namespace) -> float:
    if it < args.warmup:
        return args.lr * (it + 1) / (args.warmup + 1)
    if it > args.decay_iters:
        return args.min_lr
    ratio = (it - args.warmup) / max(1, args.decay_iters - args.warmup)
    return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (args.lr - args.min_lr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--min-lr", type=float, default=3e-4)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--decay-iters", type=int, default=40)
    parser.add_argument("--grad-clip", type=float, default=1.0)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--bug", choices=["none", "clip-zero", "stuck-in-eval", "optimizer-over-blocks"],
                        default="none")
    parser.add_argument("--bug-from", type=int, default=5, help="clip-zero: the first iteration clipped to 0")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = GPT(args.width, args.layers, args.dropout)
    optimizer = model.configure_optimizers(args.lr, 0.1, args.bug == "optimizer-over-blocks")
    gen = torch.Generator().manual_seed(args.seed + 1)

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        data = torch.randint(0, VOCAB, (args.batch, CONTEXT + 1), generator=gen)
        return data[:, :-1], data[:, 1:]

    losses = []
    model.train()
    for it in range(args.steps):
        if args.eval_every and it > 0 and it % args.eval_every == 0:
            model.eval()
            with torch.no_grad():
                x, y = batch()
                F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
            if args.bug != "stuck-in-eval":
                model.train()
        lr = get_lr(it, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = batch()
        loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        clip = 0.0 if args.bug == "clip-zero" and it >= args.bug_from else args.grad_clip
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
