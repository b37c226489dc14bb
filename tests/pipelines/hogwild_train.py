"""Hogwild training: one model in shared memory, trained at once by several
torch.multiprocessing processes (fork or spawn), as in PyTorch's hogwild example.

Prints one JSON line: the losses of a deterministic part run in the parent before the processes
start (which must not change under the agent), the parent's pid and the children's pids.
"""

import argparse
import json
import os

import torch
import torch.multiprocessing as mp
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(10, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def train(rank: int, model: nn.Module, steps: int, skip_zero_grad: bool) -> None:
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1000 + rank)
    x, y = torch.randn(32, 10, generator=gen), torch.randint(0, 3, (32,), generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    model.train()
    for _ in range(steps):
        if not skip_zero_grad:
            opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def deterministic_part() -> list[float]:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(24, 10, generator=gen), torch.randint(0, 3, (24,), generator=gen)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start-method", choices=["fork", "spawn"], default="fork")
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--bug", choices=["none", "no-zero-grad"], default="none")
    args = parser.parse_args()
    torch.set_num_threads(1)

    losses = deterministic_part()

    torch.manual_seed(5)
    model = Net()
    model.share_memory()
    ctx = mp.get_context(args.start_method)
    procs = [ctx.Process(target=train, args=(rank, model, args.steps, args.bug == "no-zero-grad"))
             for rank in range(args.procs)]
    for p in procs:
        p.start()
    # The parent keeps training the shared model too, while the children do.
    train(args.procs, model, args.steps, args.bug == "no-zero-grad")
    for p in procs:
        p.join(timeout=180)
    codes = [p.exitcode for p in procs]
    if codes != [0] * len(procs):
        raise SystemExit(f"child exit codes {codes}")
    with torch.no_grad():
        final = model(torch.ones(1, 10)).sum().item()
    print(json.dumps({"losses": losses, "main": os.getpid(), "children": [p.pid for p in procs],
                      "final_finite": final == final}))


if __name__ == "__main__":
    main()
