"""A tiny model with one parameter of a subclass that, with ``--opaque``, refuses ``data_ptr``
(a program may hide its storage), so the agent cannot fingerprint it; the training itself never
asks for it. Without ``--opaque`` the same subclass is an ordinary parameter."""

import argparse
import json

import torch
from torch import nn

OPAQUE = [False]


class OpaqueParameter(nn.Parameter):
    def data_ptr(self) -> int:
        if OPAQUE[0]:
            raise RuntimeError("this parameter does not expose its storage")
        return super().data_ptr()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--opaque", action="store_true")
    args = parser.parse_args()
    OPAQUE[0] = args.opaque

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    model[2].weight = OpaqueParameter(model[2].weight.detach().clone())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randn(32, 4)
    losses = []
    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
