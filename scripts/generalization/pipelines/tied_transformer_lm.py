"""Trains a tiny decoder-only transformer LM (pre-norm nn.TransformerEncoderLayer + causal mask) whose
output projection shares one Parameter with the token embedding (weight tying), with AdamW (no decay on
norms/biases) and a linear-warmup + cosine LambdaLR schedule; batches are random windows of a token stream."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyCausalLM(nn.Module):
    def __init__(self, vocab, d_model, n_heads, n_layers, block_size):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(block_size, d_model)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(n_layers)
        ])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # weight tying
        nn.init.normal_(self.tok_emb.weight, std=0.02)
        nn.init.normal_(self.pos_emb.weight, std=0.02)
        mask = torch.triu(torch.full((block_size, block_size), float("-inf")), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, idx):
        t = idx.size(1)
        h = self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device))
        for layer in self.layers:
            h = layer(h, src_mask=self.causal_mask[:t, :t], is_causal=True)
        return self.lm_head(self.ln_f(h))


def make_stream(gen, vocab, length):
    # repeated random "phrases" with noise: learnable by copying from context
    phrases = torch.randint(0, vocab, (12, 6), generator=gen)
    picks = torch.randint(0, len(phrases), (length // 6 + 1,), generator=gen)
    stream = phrases[picks].flatten()[:length]
    noise = torch.rand(length, generator=gen) < 0.05
    return torch.where(noise, torch.randint(0, vocab, (length,), generator=gen), stream)


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for _name, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    vocab, block = 40, 24
    gen = torch.Generator().manual_seed(args.seed)
    stream = make_stream(gen, vocab, 4000)

    model = TinyCausalLM(vocab, 32, 4, 2, block)
    assert model.lm_head.weight is model.tok_emb.weight
    optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=args.lr, betas=(0.9, 0.95))

    def lr_lambda(step):
        if step < args.warmup:
            return (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, args.steps - args.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)

    model.train()
    for _step in range(args.steps):
        starts = torch.randint(0, len(stream) - block - 1, (args.batch_size,), generator=gen)
        x = torch.stack([stream[s:s + block] for s in starts.tolist()])
        y = torch.stack([stream[s + 1:s + 1 + block] for s in starts.tolist()])
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, vocab), y.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
