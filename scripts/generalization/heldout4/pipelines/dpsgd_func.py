"""Differentially-private SGD with per-sample gradients from torch.func.

A small embedding + attention-pooling classifier over synthetic "click
sequences" (sequences of page ids; label = whether the user converts). Per
example gradients are computed with torch.func.vmap(grad(...)) over
functional_call; each is clipped to --clip-norm, summed, Gaussian noise with
std noise_multiplier * clip_norm is added, and the averaged noisy gradient is
written to .grad before a regular optimizer.step().
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap


class ClickSeqClassifier(nn.Module):
    def __init__(self, n_pages, dim):
        super().__init__()
        self.embed = nn.Embedding(n_pages, dim)
        self.attn_query = nn.Parameter(torch.randn(dim) / dim ** 0.5)
        self.out = nn.Linear(dim, 2)

    def forward(self, seq):
        e = self.embed(seq)                                   # (B, T, D)
        w = (e @ self.attn_query).softmax(-1).unsqueeze(-1)  # (B, T, 1)
        return self.out((w * e).sum(-2))


def make_batch(gen, batch_size, n_pages, seq_len):
    seq = torch.randint(0, n_pages, (batch_size, seq_len), generator=gen)
    converts = ((seq < 5).sum(1) >= 2).long()  # visiting "pricing" pages predicts conversion
    return seq, converts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--clip-norm", type=float, default=1.0)
    ap.add_argument("--noise-multiplier", type=float, default=0.5)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 70)
    noise_gen = torch.Generator().manual_seed(args.seed + 71)
    n_pages, seq_len = 30, 8
    model = ClickSeqClassifier(n_pages, args.dim)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)

    def loss_one(params, buffers, seq, label):
        logits = functional_call(model, (params, buffers), (seq.unsqueeze(0),))
        return F.cross_entropy(logits, label.unsqueeze(0))

    per_sample_grad = vmap(grad(loss_one), in_dims=(None, None, 0, 0))

    model.train()
    for step in range(args.steps):
        seq, y = make_batch(gen, args.batch_size, n_pages, seq_len)
        params = {k: v.detach() for k, v in model.named_parameters()}
        buffers = {k: v.detach() for k, v in model.named_buffers()}
        grads = per_sample_grad(params, buffers, seq, y)
        norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads.values()))
        factor = (args.clip_norm / (norms + 1e-6)).clamp(max=1.0)

        optimizer.zero_grad(set_to_none=True)
        for name, p in model.named_parameters():
            g = (grads[name] * factor.view(-1, *[1] * (grads[name].dim() - 1))).sum(0)
            noise = torch.randn(g.shape, generator=noise_gen) * args.noise_multiplier * args.clip_norm
            p.grad = (g + noise) / args.batch_size
        optimizer.step()

        with torch.no_grad():
            loss = F.cross_entropy(model(seq), y).item()
        print(f"step {step} loss {loss:.4f} mean-per-sample-norm {norms.mean().item():.3f} "
              f"clipped {(factor < 1).float().mean().item():.2f}")


if __name__ == "__main__":
    main()
