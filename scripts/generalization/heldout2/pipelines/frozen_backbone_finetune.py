"""Fine-tunes a tabular MLP whose "pretrained" lower layers are frozen with requires_grad_(False);
as in many fine-tuning scripts, ALL parameters are still handed to the optimizer (the frozen
ones simply never get a gradient). A fresh head and the top backbone layer are trained.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Backbone(nn.Module):
    def __init__(self, d_in: int, width: int) -> None:
        super().__init__()
        self.layer1 = nn.Sequential(nn.Linear(d_in, width), nn.LayerNorm(width), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU())
        self.layer3 = nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer3(self.layer2(self.layer1(x)))


class FineTuneModel(nn.Module):
    def __init__(self, d_in: int = 20, width: int = 48, n_classes: int = 3) -> None:
        super().__init__()
        self.backbone = Backbone(d_in, width)
        self.head = nn.Linear(width, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def pretend_pretrained(model: FineTuneModel, seed: int) -> None:
    """Stands in for loading a checkpoint: a deterministic state dict for the backbone."""
    g = torch.Generator().manual_seed(10_000 + seed)
    state = {k: torch.randn(v.shape, generator=g) * 0.2 if v.dim() > 1 else v.clone()
             for k, v in model.backbone.state_dict().items()}
    model.backbone.load_state_dict(state)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = FineTuneModel()
    pretend_pretrained(model, args.seed)
    for module in (model.backbone.layer1, model.backbone.layer2):
        module.requires_grad_(False)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"trainable params: {n_train}")

    w = torch.randn(20, 3, generator=gen)
    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 20, generator=gen)
        y = (x @ w + 0.3 * torch.randn(args.batch_size, 3, generator=gen)).argmax(-1)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
