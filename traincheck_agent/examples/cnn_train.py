"""A small CNN trained on synthetic images: the bundled example for the demo and benchmarks.

Plain PyTorch, nothing of traincheck in it: the agent instruments it from the outside.
Deterministic for a given seed; prints one line per logged step and the final loss values as
JSON on the last line so that runs with and without the agent can be compared bit for bit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(16 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.pool(torch.relu(self.conv2(x)))
        x = self.dropout(torch.flatten(x, 1))
        return self.fc2(torch.relu(self.fc1(x)))


def synthetic_data(n: int, seed: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    images = torch.randn(n, 1, 28, 28, generator=gen)
    labels = torch.randint(0, 10, (n,), generator=gen)
    images[torch.arange(n), 0, labels, labels] += 3.0  # a learnable signal
    return TensorDataset(images, labels)


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--optimizer", choices=["adam", "sgd", "adadelta"], default="adam")
    parser.add_argument("--autocast", choices=["none", "bf16"], default="none",
                        help="run the forward passes under CPU bfloat16 autocast")
    parser.add_argument("--bug", choices=["none", "no-zero-grad", "dropout-in-eval"], default="none",
                        help="inject a silent bug: gradients never cleared, or dropout left on in eval")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    model = SmallCNN()
    if args.bug == "dropout-in-eval":  # functional dropout that ignores the module's mode
        model.dropout.forward = lambda x: nn.functional.dropout(x, 0.25, training=True)  # type: ignore[method-assign, assignment]
    optimizer: torch.optim.Optimizer
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    elif args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * 10, momentum=0.9)
    else:
        optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    loss_fn = nn.CrossEntropyLoss()
    data = synthetic_data(args.steps * args.batch_size, args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        generator=torch.Generator().manual_seed(args.seed))
    eval_batch = synthetic_data(256, args.seed + 1).tensors

    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if args.autocast == "bf16"
                else contextlib.nullcontext())
    losses: list[float] = []
    started = time.perf_counter()
    for step, (images, labels) in enumerate(loader, start=1):
        model.train()
        if args.bug != "no-zero-grad":
            optimizer.zero_grad()
        with autocast:
            loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % args.eval_every == 0 or step == args.steps:
            model.eval()
            with torch.no_grad(), autocast:
                accuracy = (model(eval_batch[0]).argmax(1) == eval_batch[1]).float().mean().item()
            print(f"step {step:4d}  loss {loss.item():.4f}  eval accuracy {accuracy:.3f}")
        if step >= args.steps:
            break
    train_seconds = time.perf_counter() - started
    print(json.dumps({"losses": losses, "train_seconds": round(train_seconds, 4)}))
    return losses


if __name__ == "__main__":
    main()
