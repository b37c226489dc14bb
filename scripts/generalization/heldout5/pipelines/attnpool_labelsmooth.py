"""Gated attention-pooling (multiple-instance) classifier over bags of patch features, with label smoothing and SequentialLR (linear warmup then cosine)."""
import argparse

import torch
import torch.nn as nn


class GatedAttentionMIL(nn.Module):
    def __init__(self, in_dim, hidden, n_classes):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU())
        self.attn_v = nn.Linear(hidden, hidden // 2)
        self.attn_u = nn.Linear(hidden, hidden // 2)
        self.attn_w = nn.Linear(hidden // 2, 1)
        self.classifier = nn.Linear(hidden, n_classes)

    def forward(self, bags):
        h = self.embed(bags)
        scores = self.attn_w(torch.tanh(self.attn_v(h)) * torch.sigmoid(self.attn_u(h)))
        weights = scores.softmax(dim=1)
        return self.classifier((weights * h).sum(dim=1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = GatedAttentionMIL(12, 32, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    warm = max(1, args.steps // 4)
    scheduler = torch.optim.lr_scheduler.SequentialLR(
        optimizer,
        schedulers=[
            torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=warm),
            torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, args.steps - warm)),
        ],
        milestones=[warm],
    )
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    g = torch.Generator().manual_seed(args.seed)
    for step in range(args.steps):
        bags = torch.randn(args.batch_size, 10, 12, generator=g)
        labels = torch.randint(0, 2, (args.batch_size,), generator=g)
        bags[labels == 1, 0, :4] += 3.0  # one key instance marks a positive bag
        optimizer.zero_grad()
        loss = criterion(model(bags), labels)
        loss.backward()
        optimizer.step()
        scheduler.step()
        print(f"step {step} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
