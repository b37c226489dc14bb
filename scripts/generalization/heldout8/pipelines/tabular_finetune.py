"""Tabular classifier fine-tuning: pretrained-style encoder + task classifier, AdamW + StepLR."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class FeatureEncoder(nn.Module):
    def __init__(self, n_num, n_cat, card, hidden):
        super().__init__()
        self.cat_embed = nn.Embedding(card, 8)
        self.num_proj = nn.Linear(n_num, hidden)
        self.mix = nn.Sequential(nn.Linear(hidden + 8 * n_cat, hidden), nn.SiLU(), nn.LayerNorm(hidden))

    def forward(self, x_num, x_cat):
        e = self.cat_embed(x_cat).flatten(1)
        h = F.silu(self.num_proj(x_num))
        return self.mix(torch.cat([h, e], dim=1))


class TabularNet(nn.Module):
    def __init__(self, n_num, n_cat, card, hidden, n_classes):
        super().__init__()
        self.encoder = FeatureEncoder(n_num, n_cat, card, hidden)
        self.classifier = nn.Linear(hidden, n_classes)

    def forward(self, x_num, x_cat):
        return self.classifier(self.encoder(x_num, x_cat))


def adapt_classifier(model, n_classes):
    """Swap in a freshly initialised task head (label space differs from pretraining)."""
    hidden = model.classifier.in_features
    model.classifier = nn.Linear(hidden, n_classes)
    return model


def build_optimizer(model, lr, wd):
    decay, no_decay = [], []
    for _n, p in model.named_parameters():
        (no_decay if p.ndim < 2 else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr)


def make_batch(gen, bs, n_num, n_cat, card, n_classes):
    x_num = torch.randn(bs, n_num, generator=gen)
    x_cat = torch.randint(0, card, (bs, n_cat), generator=gen)
    y = ((x_num[:, 0] + 0.3 * x_cat[:, 0].float()).long()) % n_classes
    return x_num, x_cat, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(1000 + args.seed)
    n_num, n_cat, card, pre_classes, n_classes = 6, 3, 10, 10, 4

    model = TabularNet(n_num, n_cat, card, args.hidden, pre_classes)
    if args.bug == "optimizer-wrong-params":
        # optimizer set up from the "pretrained" model, head adapted afterwards
        opt = build_optimizer(model, args.lr, args.weight_decay)
        adapt_classifier(model, n_classes)
    else:
        adapt_classifier(model, n_classes)
        opt = build_optimizer(model, args.lr, args.weight_decay)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)

    model.train()
    for step in range(args.steps):
        x_num, x_cat, y = make_batch(gen, args.batch_size, n_num, n_cat, card, n_classes)
        logits = model(x_num, x_cat)
        loss = F.cross_entropy(logits, y, label_smoothing=0.05)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        acc = (logits.argmax(1) == y).float().mean().item()
        print(f"step {step} loss {loss.item():.4f} acc {acc:.3f} lr {sched.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
