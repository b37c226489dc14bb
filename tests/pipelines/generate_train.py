"""Train a tiny token LM for a few steps and sample from it after every step.

Each step ends with a few ``tiny_generate.generate`` calls with seeded random prompt lengths,
batch sizes and limits (``max_new_tokens`` or ``max_length``); sampling stops early when every
row has emitted EOS, so the limit is reached by some calls and not by others. ``--bug
overshoot`` makes the decoding loop generate one token past its limit. The last line printed is
JSON: the losses and, for every generate call, the step it ran in and what it produced.
"""

import argparse
import json
import random

import tiny_generate
import torch
from torch import nn

SEQ_LEN = 10


def training_batch(gen: torch.Generator, batch: int) -> torch.Tensor:
    """Random token runs of 3-8 tokens, each followed by EOS up to SEQ_LEN."""
    tokens = torch.randint(1, tiny_generate.VOCAB, (batch, SEQ_LEN), generator=gen)
    lengths = torch.randint(3, 9, (batch, 1), generator=gen)
    return torch.where(torch.arange(SEQ_LEN)[None] < lengths, tokens, torch.full_like(tokens, tiny_generate.EOS))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--calls-per-step", type=int, default=3)
    parser.add_argument("--max-new", type=int, default=8, help="largest limit drawn for a generate call")
    parser.add_argument("--bug", choices=["none", "overshoot"], default="none")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    if args.bug == "overshoot":
        tiny_generate.OVERSHOOT = 1
    model = tiny_generate.TinyLM()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(args.seed + 1)
    rng = random.Random(args.seed)
    losses, generations = [], []
    for step in range(args.steps):
        model.train()
        optimizer.zero_grad()
        batch = training_batch(gen, 16)
        logits = model(batch[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, tiny_generate.VOCAB), batch[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

        model.eval()
        with torch.no_grad():
            for call in range(args.calls_per_step):
                prompt = training_batch(gen, rng.randint(1, 2))[:, : rng.randint(1, 5)]
                limit = rng.randint(1, args.max_new)
                temperature = rng.choice([0.7, 1.0, 1.3])
                if call % 3 == 2:
                    kwargs = {"max_length": prompt.shape[1] + limit}
                else:
                    kwargs = {"max_new_tokens": limit}
                out = tiny_generate.generate(model, prompt, temperature=temperature, generator=gen, **kwargs)
                new = out.shape[1] - prompt.shape[1]
                generations.append({"step": step + 1, "prompt_len": prompt.shape[1], **kwargs,
                                    "new_tokens": new, "over_limit": new > limit})
    print(json.dumps({"losses": losses, "generations": generations}))


if __name__ == "__main__":
    main()
