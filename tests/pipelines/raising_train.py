"""A short training loop whose user code raises, in one of several places; prints what the
exception looks like (type, message, the script's own traceback frames, the chain of causes)
as JSON on the last stdout line, then lets it propagate."""

import argparse
import json
import traceback

import torch
from torch import nn


class Gate(nn.Module):
    """A module whose forward raises (called through nn.Module.__call__, a wrapped API)."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.calls = 0
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == self.fail_at:
            try:
                {}["missing"]
            except KeyError as err:
                raise ValueError(f"gate refused call {self.calls}") from err
        return self.linear(x)


def train(where: str, steps: int) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(Gate(fail_at=3 if where == "forward" else -1), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 2, (16,), generator=torch.Generator().manual_seed(2))
    for step in range(steps):
        optimizer.zero_grad()
        out = model(x)
        if where == "torch" and step == 2:
            out = nn.functional.linear(out, torch.ones(3, 5))  # shape mismatch inside a torch API
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        optimizer.step()
        if where == "loop" and step == 2:
            raise KeyError(f"user error at step {step}")


def describe(exc: BaseException) -> dict:
    frames = [(f.name, f.lineno, f.line) for f in traceback.extract_tb(exc.__traceback__) if f.filename == __file__]
    chain = []
    cause: BaseException | None = exc
    while cause is not None:
        chain.append(f"{type(cause).__module__}.{type(cause).__qualname__}: {cause}")
        cause = cause.__cause__ or cause.__context__
    return {"type": f"{type(exc).__module__}.{type(exc).__qualname__}", "message": str(exc), "frames": frames,
            "chain": chain}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--where", choices=["forward", "torch", "loop"], required=True)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    try:
        train(args.where, args.steps)
    except BaseException as exc:
        print(json.dumps(describe(exc)), flush=True)
        raise


if __name__ == "__main__":
    main()
