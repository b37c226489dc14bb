"""Multi-label tagger with sigmoid focal loss, AdamW parameter groups (no weight decay on norms/biases, lower lr for the encoder) and ExponentialLR."""
import argparse

import torch
import torch.nn as nn


def sigmoid_focal_loss(logits, targets, alpha=0.25, gamma=2.0):
    p = torch.sigmoid(logits)
    ce = nn.functional.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
    return (alpha_t * ce * (1 - p_t) ** gamma).mean()


class Tagger(nn.Module):
    def __init__(self, in_dim, hidden, n_tags):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, hidden), nn.LayerNorm(hidden), nn.SiLU(),
                                     nn.Linear(hidden, hidden), nn.LayerNorm(hidden), nn.SiLU())
        self.tags = nn.Linear(hidden, n_tags)

    def forward(self, x):
        return self.tags(self.encoder(x))


def param_groups(model, lr, weight_decay, encoder_lr_scale):
    groups = {}
    for name, param in model.named_parameters():
        no_decay = param.ndim == 1
        is_encoder = name.startswith("encoder.")
        key = (is_encoder, no_decay)
        if key not in groups:
            groups[key] = {"params": [], "lr": lr * (encoder_lr_scale if is_encoder else 1.0),
                           "weight_decay": 0.0 if no_decay else weight_decay}
        groups[key]["params"].append(param)
    return list(groups.values())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--gamma", type=float, default=2.0)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = Tagger(20, 32, 6)
    optimizer = torch.optim.AdamW(param_groups(model, args.lr, 0.05, 0.5))
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
    g = torch.Generator().manual_seed(args.seed)
    proj = torch.randn(20, 6, generator=g)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 20, generator=g)
        targets = (x @ proj > 1.0).float()
        optimizer.zero_grad()
        loss = sigmoid_focal_loss(model(x), targets, gamma=args.gamma)
        loss.backward()
        optimizer.step()
        scheduler.step()
        print(f"step {step} focal {loss.item():.5f}")


if __name__ == "__main__":
    main()
