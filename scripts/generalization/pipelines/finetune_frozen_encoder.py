"""Fine-tunes a fresh classification head on top of a frozen MLP encoder (synthetic 4-class blobs).
Bug `optimizer-wrong-params`: the optimizer is built over the frozen encoder's parameters instead of
the head's, so optimizer.step() never changes anything (the head has grads but is not optimized)."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Encoder(nn.Module):
    def __init__(self, d_in, d_hidden):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.norm = nn.LayerNorm(d_hidden)

    def forward(self, x):
        h = F.gelu(self.fc1(x))
        return self.norm(h + F.gelu(self.fc2(h)))


class FineTuneClassifier(nn.Module):
    def __init__(self, d_in, d_hidden, n_classes):
        super().__init__()
        self.backbone = Encoder(d_in, d_hidden)
        self.head = nn.Sequential(nn.Dropout(0.1), nn.Linear(d_hidden, n_classes))

    def forward(self, x):
        return self.head(self.backbone(x))


def make_blobs(gen, n, d_in, n_classes):
    centers = torch.randn(n_classes, d_in, generator=gen) * 1.5
    y = torch.randint(0, n_classes, (n,), generator=gen)
    x = centers[y] + torch.randn(n, d_in, generator=gen)
    return x, y


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    p.add_argument("--bug", choices=["none", "optimizer-wrong-params"], default="none")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    x_all, y_all = make_blobs(torch.Generator().manual_seed(1000 + args.seed), 512, 24, 4)
    x, y, x_val, y_val = x_all[:384], y_all[:384], x_all[384:], y_all[384:]
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed))

    model = FineTuneClassifier(24, 48, 4)
    # In the real setting the encoder comes from a pretraining checkpoint; it stays frozen.
    model.backbone.requires_grad_(False)

    if args.bug == "optimizer-wrong-params":
        params_to_tune = model.backbone.parameters()
    else:
        params_to_tune = model.head.parameters()
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(params_to_tune, lr=args.lr, momentum=0.9)
    else:
        optimizer = torch.optim.Adam(params_to_tune, lr=args.lr)

    model.train()
    step = 0
    loss = torch.tensor(float("nan"))
    while step < args.steps:
        for xb, yb in loader:
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step >= args.steps:
                break

    model.eval()
    with torch.no_grad():
        val_acc = (model(x_val).argmax(-1) == y_val).float().mean().item()
    print(f"val acc {val_acc:.3f}")
    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
