"""A tiny token language model and a ``generate`` loop, importable so that a policy can wrap
``tiny_generate.generate`` (see generate_policy.yaml)."""

from __future__ import annotations

import torch
from torch import nn

VOCAB = 12
EOS = 0
# Extra tokens generated past the limit: 1 simulates an off-by-one in the decoding loop.
OVERSHOOT = 0


class TinyLM(nn.Module):
    def __init__(self, vocab: int = VOCAB, width: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.rnn = nn.GRU(width, width, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.rnn(self.embed(tokens))
        return self.head(hidden)


def generate(
    model: nn.Module,
    prompt: torch.Tensor,
    max_new_tokens: int | None = None,
    max_length: int | None = None,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Sample continuations of ``prompt`` ([batch, length]) until every row has emitted EOS or
    the limit is reached: at most ``max_new_tokens`` new tokens, at most ``max_length`` tokens
    in all. Finished rows are padded with EOS."""
    budget = max_new_tokens if max_new_tokens is not None else max_length - prompt.shape[1]
    if max_new_tokens is not None and max_length is not None:
        budget = min(budget, max_length - prompt.shape[1])
    seq = prompt
    done = torch.zeros(prompt.shape[0], dtype=torch.bool)
    for _ in range(budget + OVERSHOOT):
        probs = torch.softmax(model(seq)[:, -1] / temperature, dim=-1)
        token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        token = torch.where(done, torch.full_like(token, EOS), token)
        seq = torch.cat([seq, token[:, None]], dim=1)
        done |= token == EOS
        if bool(done.all()):
            break
    return seq
