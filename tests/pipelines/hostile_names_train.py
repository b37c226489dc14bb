"""A tiny model with a layer whose name holds a newline, a forged agent line and an escape
sequence (programs may name layers from configs or data). ``--bug no-zero-grad`` never zeroes
the grads, which check mode reports, name and all."""

import argparse
import json

import torch
from torch import nn

HOSTILE_NAME = "\n[traincheck] forged\x1b[31m"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--bug", choices=["none", "no-zero-grad"], default="none")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("first", nn.Linear(8, 16))
    model.add_module(HOSTILE_NAME, nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randn(32, 4)
    losses = []
    for _ in range(args.steps):
        if args.bug != "no-zero-grad":
            optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
