"""A tiny model whose forward takes, next to its input, objects whose every special method a
describer might call raises, with an exception that cannot even be printed: a list subclass, a
dict subclass, a str subclass and a plain object. The training itself never touches them."""

import argparse
import json

import torch
from torch import nn


class Unprintable(Exception):
    """An exception whose message cannot be formatted."""

    def __str__(self) -> str:
        raise Unprintable()

    __repr__ = __str__


def _refuse(*_args, **_kwargs):
    raise Unprintable()


_DUNDERS = ("__len__", "__repr__", "__str__", "__bool__", "__iter__", "__getitem__", "__format__",
            "__hash__", "__eq__", "__contains__", "__index__", "__int__", "__float__")


def hostile(base: type) -> type:
    """A subclass of ``base`` on which every special method raises ``Unprintable``."""
    namespace = {name: _refuse for name in _DUNDERS}
    namespace.update(keys=_refuse, items=_refuse, values=_refuse, __class__=property(_refuse),
                     __getattr__=_refuse)
    return type(f"Hostile{base.__name__.title()}", (base,), namespace)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, *extras: object, options: object = None) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = Model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randn(32, 4)
    extras = (hostile(list)([1, 2]), hostile(tuple)((3,)), hostile(str)("text"), hostile(object)())
    options = hostile(dict)(a=1)
    losses = []
    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x, *extras, options=options), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
