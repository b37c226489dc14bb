"""A residual MLP regressor with a custom-initialised input layer, functional dropout in its
blocks, an evaluation every few steps and, optionally, bf16 autocast. Three bugs a real script
makes one line deep:

- ``init-overwrite``: the model's init loop matches layers with ``isinstance`` and so
  re-initialises the custom layer its constructor already initialised;
- ``autocast-escape``: a helper runs the second block's layer with autocast disabled;
- ``dropout-default``: the blocks call ``F.dropout(h, p)`` and rely on the default
  ``training=True``, so dropout stays on in evaluation;
- ``left-in-eval``: the evaluation helper never switches the model back to training mode;
- ``double-apply``: with ``--init apply``, the model's ``apply(init)`` runs twice.

``--two-optimizers`` trains the output layer with its own optimizer, stepped after the other.
"""

from __future__ import annotations

import argparse
import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ScaledLinear(nn.Linear):
    """A linear layer that initialises itself with a fan-in-scaled normal."""

    def __init__(self, fan_in: int, fan_out: int) -> None:
        super().__init__(fan_in, fan_out)
        with torch.no_grad():
            self.weight.normal_(0.0, 1.0 / math.sqrt(fan_in))
            self.bias.zero_()


class Block(nn.Module):
    def __init__(self, width: int, p: float, escape: bool, default_dropout: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.p, self.escape, self.default_dropout = p, escape, default_dropout

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.escape:  # "keep this layer in full precision"
            with torch.autocast("cpu", enabled=False):
                out = self.fc(h.float())
        else:
            out = self.fc(h)
        out = F.dropout(out, self.p) if self.default_dropout else F.dropout(out, self.p, training=self.training)
        return self.norm(h + F.relu(out))


class ResidualMLP(nn.Module):
    def __init__(self, width: int, p: float, escape_block: int, default_dropout: bool) -> None:
        super().__init__()
        self.inp = ScaledLinear(6, width)
        self.blocks = nn.ModuleList(Block(width, p, i == escape_block, default_dropout) for i in range(2))
        self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)


def init_weights(model: nn.Module, match_subclasses: bool) -> None:
    for m in model.modules():
        if type(m) is nn.Linear or (match_subclasses and isinstance(m, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)


def init_linear(m: nn.Module) -> None:
    if type(m) is nn.Linear:
        nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")
        nn.init.zeros_(m.bias)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--eval-every", type=int, default=3)
    parser.add_argument("--autocast", action="store_true", help="train under cpu bf16 autocast")
    parser.add_argument("--init", choices=["loop", "apply"], default="loop")
    parser.add_argument("--two-optimizers", action="store_true")
    parser.add_argument("--bug", choices=["none", "init-overwrite", "autocast-escape", "dropout-default",
                                          "left-in-eval", "double-apply"], default="none")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = ResidualMLP(args.width, 0.2, 1 if args.bug == "autocast-escape" else -1, args.bug == "dropout-default")
    if args.init == "apply":
        for _ in range(2 if args.bug == "double-apply" else 1):
            model.apply(init_linear)
    else:
        init_weights(model, match_subclasses=args.bug == "init-overwrite")
    head = list(model.out.parameters()) if args.two_optimizers else []
    body = [p for p in model.parameters() if all(p is not q for q in head)]
    optimizers = [torch.optim.Adam(body, lr=args.lr)] + ([torch.optim.SGD(head, lr=args.lr)] if head else [])
    true_w = torch.randn(6, 1, generator=gen)
    x_val = torch.randn(32, 6, generator=gen)
    y_val = x_val @ true_w

    for step in range(args.steps):
        x = torch.randn(16, 6, generator=gen)
        y = x @ true_w + 0.05 * torch.randn(16, 1, generator=gen)
        region = torch.autocast("cpu", dtype=torch.bfloat16) if args.autocast else contextlib.nullcontext()
        with region:
            pred = model(x)
        loss = F.mse_loss(pred.float(), y)
        for opt in optimizers:
            opt.zero_grad()
        loss.backward()
        for opt in optimizers:
            opt.step()
        if args.eval_every and (step + 1) % args.eval_every == 0:
            model.eval()
            with torch.no_grad():
                val = F.mse_loss(model(x_val).float(), y_val)
            if args.bug != "left-in-eval":
                model.train()
            print(f"step {step} loss {loss.item():.4f} val {val.item():.4f}")


if __name__ == "__main__":
    main()
