"""A tiny model trained through ``torch.compile`` on synthetic data.

The last stdout line is JSON: the losses of every step, a checksum of the final weights, and
torch._dynamo's counters (graph breaks, recompiles, frames compiled), so a run under the agent
can be compared with a plain one.
"""

import argparse
import json

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, graph_break: bool = False) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh())
        self.head = nn.Linear(16, 3)
        self.graph_break = graph_break

    def forward(self, x):
        h = self.body(x)
        if self.graph_break:  # splits the compiled forward in two graphs
            torch._dynamo.graph_break()
        return self.head(h)


def dynamo_counters() -> dict:
    """The dynamo figures that grow on graph breaks and recompiles."""
    from torch._dynamo.utils import counters

    return {
        "graph_breaks": sum(counters["graph_break"].values()),
        "break_reasons": sorted(counters["graph_break"]),
        "recompiles": sum(counters["recompiles"].values()),
        "unique_graphs": counters["stats"]["unique_graphs"],
        "frames_ok": counters["frames"]["ok"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--backend", default="inductor", help="torch.compile backend (inductor, aot_eager, eager)")
    parser.add_argument("--no-compile", action="store_true", help="train the plain module")
    parser.add_argument("--graph-break", action="store_true", help="break the forward's graph once")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = Net(args.graph_break)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if not args.no_compile:
        model = torch.compile(model, backend=args.backend)
    gen = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(32, 8, generator=gen)
    y = torch.randint(0, 3, (32,), generator=gen)
    losses = []
    model.train()
    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        eval_loss = nn.functional.cross_entropy(model(x), y).item()
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(json.dumps({"losses": losses, "eval_loss": eval_loss, "checksum": checksum,
                      "dynamo": dynamo_counters()}))


if __name__ == "__main__":
    main()
