"""A training loop that counts the tensor operations it runs, the way profilers and debugging
tools do: a ``TorchDispatchMode`` active around the whole loop and a tensor subclass whose
``__torch_function__`` counts the calls made on it. Prints the counts as JSON: a tool that
watches the training must not show up in them."""

from __future__ import annotations

import json

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode


class CountingMode(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


class CountedTensor(torch.Tensor):
    calls = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        CountedTensor.calls += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def main() -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scale = torch.ones(1).as_subclass(CountedTensor)
    mode = CountingMode()
    with mode:
        for _ in range(4):
            x = torch.randn(8, 4, generator=gen)
            loss = F.mse_loss(model(x), x.sum(1, keepdim=True)) * scale
            opt.zero_grad()
            loss.backward()
            opt.step()
    print(json.dumps({"dispatch": mode.count, "torch_function": CountedTensor.calls}))


if __name__ == "__main__":
    main()
