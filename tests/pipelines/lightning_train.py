"""A tiny classifier trained with PyTorch Lightning on CPU, on seeded synthetic data.

Lightning runs the forward and backward of each iteration inside ``optimizer.step(closure)``
and clears grads through its own ``optimizer_zero_grad`` hook. ``--bug`` plants a fault:
``head-not-optimized`` hands the optimizer the backbone only (the head gets grads that no step
applies), ``no-zero-grad`` overrides the hook with one that never clears the grads.
"""

import argparse
import json
import warnings

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self, lr: float, optimizer: str, bug: str) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)
        self.lr = lr
        self.optimizer_name = optimizer
        self.bug = bug
        self.losses: list[float] = []

    def forward(self, x):
        return self.head(self.backbone(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        params = self.backbone.parameters() if self.bug == "head-not-optimized" else self.parameters()
        if self.optimizer_name == "sgd":
            return torch.optim.SGD(params, lr=self.lr * 10)
        return torch.optim.Adam(params, lr=self.lr)

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        if self.bug != "no-zero-grad":
            super().optimizer_zero_grad(epoch, batch_idx, optimizer)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    parser.add_argument("--bug", choices=["none", "head-not-optimized", "no-zero-grad"], default="none")
    parser.add_argument("--accumulate", type=int, default=1,
                        help="accumulate_grad_batches: batches per optimizer step (the others run outside it)")
    args = parser.parse_args()

    warnings.filterwarnings("ignore")  # Lightning's advice (workers, logging) is not under test
    L.seed_everything(args.seed, verbose=False)
    gen = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(64 * args.accumulate, 16, generator=gen)
    y = torch.randint(0, 4, (64 * args.accumulate,), generator=gen)
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    model = Classifier(args.lr, args.optimizer, args.bug)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=args.steps, logger=False,
                        accumulate_grad_batches=args.accumulate,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, loader)
    print(json.dumps({"losses": model.losses}))


if __name__ == "__main__":
    main()
