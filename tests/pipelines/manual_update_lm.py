"""An LSTM language model trained the way pytorch/examples' ``word_language_model`` trains by
default: no ``torch.optim``, the parameters updated by hand through ``.data`` after clipping,
``model.zero_grad()`` at the top of each iteration, the hidden state carried across batches and
detached. Seeded random tokens. ``--bug no-zero-grad`` drops the ``zero_grad`` after the first
iteration, so the grads add up."""

import argparse
import json

import torch
from torch import nn

VOCAB = 24


class RNNModel(nn.Module):
    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(VOCAB, width)
        self.rnn = nn.LSTM(width, width, batch_first=True)
        self.decoder = nn.Linear(width, VOCAB)

    def forward(self, tokens: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]):
        output, hidden = self.rnn(self.drop(self.encoder(tokens)), hidden)
        return self.decoder(self.drop(output)), hidden


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=2.0)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--bptt", type=int, default=6)
    parser.add_argument("--bug", choices=["none", "no-zero-grad"], default="none")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = RNNModel(args.width, 0.2)
    gen = torch.Generator().manual_seed(args.seed + 1)
    stream = torch.randint(0, VOCAB, (args.batch, args.steps * args.bptt + 1), generator=gen)
    hidden = (torch.zeros(1, args.batch, args.width), torch.zeros(1, args.batch, args.width))
    losses = []
    model.train()
    for i in range(args.steps):
        start = i * args.bptt
        data, targets = stream[:, start:start + args.bptt], stream[:, start + 1:start + 1 + args.bptt]
        hidden = tuple(h.detach() for h in hidden)
        if args.bug == "none" or i == 0:
            model.zero_grad()
        output, hidden = model(data, hidden)
        loss = nn.functional.cross_entropy(output.reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-args.lr)
        losses.append(loss.item())
    print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
