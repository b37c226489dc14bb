"""A small decoder-only transformer language model trained on synthetic tokens.

Runs on CPU (tiny sizes, for tests) or CUDA (``--device cuda --size medium`` for GPU
benchmarks, optionally under bf16 autocast). Plain PyTorch: the agent instruments it from the
outside. Prints the loss values and the median step time as JSON on its last line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn

SIZES = {  # d_model, layers, heads, vocabulary, context
    "tiny": (64, 2, 4, 256, 32),
    "bench": (128, 4, 4, 512, 64),  # nanoGPT's CPU shape; batches of 4: about 30 ms a step on 2 cores
    "small": (256, 4, 4, 2048, 128),
    "medium": (768, 12, 12, 50304, 512),  # GPT-2-small shape, ~124M parameters
}


class Float32Linear(nn.Linear):
    """A projection computed in float32 with autocast switched off (as a hand-written kernel
    wrapper might do): inside an autocast region its output stays float32."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            return nn.functional.linear(x.float(), self.weight.float(), self.bias.float())


class Block(nn.Module):
    def __init__(self, d: int, heads: int, escape_autocast: bool = False) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        out = Float32Linear(4 * d, d) if escape_autocast else nn.Linear(4 * d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), out)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, d: int, layers: int, heads: int, vocab: int, context: int,
                 escape_autocast: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        # The bug: the last block's MLP output projection escapes autocast.
        self.blocks = nn.ModuleList(Block(d, heads, escape_autocast and i == layers - 1) for i in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf"), device=tokens.device), diagonal=1)
        x = self.embed(tokens) + self.pos(torch.arange(n, device=tokens.device))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--autocast", choices=["none", "bf16"], default="none")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bug", choices=["none", "escape-autocast"], default="none",
                        help="inject a silent bug: one layer computes in float32 inside the autocast region")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    d, layers, heads, vocab, context = SIZES[args.size]
    device = torch.device(args.device)
    model = TinyLM(d, layers, heads, vocab, context, args.bug == "escape-autocast").to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    losses, times = [], []
    for _ in range(args.steps):
        tokens = torch.randint(0, vocab, (args.batch_size, context + 1), device=device, generator=gen)
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            logits = model(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.float().reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # syncs, as most training loops' logging does
        times.append(time.perf_counter() - started)
    warm = times[len(times) // 4 :] or times
    print(json.dumps({"losses": losses, "median_step_s": statistics.median(warm),
                      "parameters": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
