"""Fine-tune a pretrained MLP feature extractor on a new label space.

The "pretrained" checkpoint is produced in-memory from a fixed seed (stand-in for
a hub download).  The 10-way classifier head is swapped for a fresh
``--num-classes`` head and fine-tuned; the backbone is optionally frozen and
optionally unfrozen later with a smaller learning rate.
"""
import argparse
import io

import torch
import torch.nn as nn
import torch.nn.functional as F

D_IN, WIDTH, PRETRAIN_CLASSES = 32, 64, 10


class FeatureNet(nn.Module):
    def __init__(self, d_in, width, n_out):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Linear(d_in, width),
            nn.LayerNorm(width),
            nn.GELU(),
            nn.Linear(width, width),
            nn.GELU(),
        )
        self.head = nn.Linear(width, n_out)

    def forward(self, x):
        return self.head(self.backbone(x))


def pretrained_state_dict():
    # Pretend this came from disk: serialise into a buffer and load it back.
    rng_state = torch.get_rng_state()
    torch.manual_seed(1234)
    ref = FeatureNet(D_IN, WIDTH, PRETRAIN_CLASSES)
    torch.set_rng_state(rng_state)
    buf = io.BytesIO()
    torch.save(ref.state_dict(), buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def make_split(g, n, centers):
    y = torch.randint(0, centers.shape[0], (n,), generator=g)
    x = centers[y] + 0.8 * torch.randn(n, centers.shape[1], generator=g)
    return x, y


def build_optimizer(params, args):
    if args.optimizer == "sgd":
        return torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    return torch.optim.Adam(params, lr=args.lr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-classes", type=int, default=5)
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    p.add_argument("--freeze-backbone", type=int, default=1)
    p.add_argument("--unfreeze-at", type=int, default=-1,
                   help="step at which the backbone joins training (lr * 0.1)")
    p.add_argument("--zero-grad", choices=["top", "after"], default="after")
    p.add_argument("--set-to-none", type=int, default=1)
    p.add_argument("--bug", default="none")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 100)
    centers = 1.5 * torch.randn(args.num_classes, D_IN, generator=g)
    x_tr, y_tr = make_split(g, 512, centers)
    x_va, y_va = make_split(g, 256, centers)

    model = FeatureNet(D_IN, WIDTH, PRETRAIN_CLASSES)
    model.load_state_dict(pretrained_state_dict())
    if args.freeze_backbone:
        for prm in model.backbone.parameters():
            prm.requires_grad_(False)

    if args.bug == "optimizer-wrong-params":
        optimizer = build_optimizer([q for q in model.parameters() if q.requires_grad], args)
        model.head = nn.Linear(WIDTH, args.num_classes)
    else:
        model.head = nn.Linear(WIDTH, args.num_classes)
        optimizer = build_optimizer([q for q in model.parameters() if q.requires_grad], args)

    perm = torch.randperm(x_tr.shape[0], generator=g)
    for step in range(args.steps):
        if step == args.unfreeze_at and args.freeze_backbone:
            for prm in model.backbone.parameters():
                prm.requires_grad_(True)
            optimizer.add_param_group({"params": list(model.backbone.parameters()),
                                       "lr": args.lr * 0.1})
        model.train()
        if args.zero_grad == "top":
            optimizer.zero_grad(set_to_none=bool(args.set_to_none))
        idx = perm[(step * args.batch_size) % 512:(step * args.batch_size) % 512 + args.batch_size]
        logits = model(x_tr[idx])
        loss = F.cross_entropy(logits, y_tr[idx], label_smoothing=0.05)
        loss.backward()
        optimizer.step()
        if args.zero_grad == "after":
            optimizer.zero_grad(set_to_none=bool(args.set_to_none))
        print(f"step {step} loss {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        logits = model(x_va)
        val_loss = F.cross_entropy(logits, y_va).item()
        acc = (logits.argmax(1) == y_va).float().mean().item()
    print(f"val_loss {val_loss:.4f} val_acc {acc:.4f}")


if __name__ == "__main__":
    main()
