"""Small CNN with BatchNorm trained on synthetic blob images; keeps an EMA copy of the weights
(torch.optim.swa_utils.AveragedModel) that is used for evaluation."""
import argparse

import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


def conv_bn(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class BlobNet(nn.Module):
    def __init__(self, n_cls=3):
        super().__init__()
        self.features = nn.Sequential(conv_bn(1, 8), conv_bn(8, 16, 2), conv_bn(16, 16, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(16, n_cls)

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


def blobs(g, n, size=16, n_cls=3):
    """class = number of bright blobs (1..3)."""
    y = torch.randint(0, n_cls, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
    img = torch.zeros(n, 1, size, size)
    for i in range(n):
        for _ in range(int(y[i]) + 1):
            cy, cx = (torch.rand(2, generator=g) * (size - 4) + 2).tolist()
            img[i, 0] += torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 3.0)
    return img + 0.1 * torch.randn(img.shape, generator=g), y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    ap.add_argument("--grad-clip", type=float, default=0.0)
    ap.add_argument("--ema-decay", type=float, default=0.8)
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    model = BlobNet()
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(args.ema_decay), use_buffers=True)
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=1e-4)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr * 0.05, weight_decay=0.05)
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    g = torch.Generator().manual_seed(args.seed + 9)
    xt, yt = blobs(torch.Generator().manual_seed(555), 192)

    for step in range(args.steps):
        model.train()
        images, target = blobs(g, args.batch_size)
        output = model(images)
        loss = criterion(output, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.grad_clip > 0:
            gn = nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        else:
            gn = torch.tensor(0.0)
        optimizer.step()
        ema.update_parameters(model)
        print(f"Epoch[0] step {step} loss {loss.item():.4f} grad_norm {gn.item():.3f}")

    ema.eval()
    model.eval()
    with torch.no_grad():
        acc_model = (model(xt).argmax(1) == yt).float().mean().item()
        acc_ema = (ema(xt).argmax(1) == yt).float().mean().item()
    print(f"acc {acc_model:.4f} ema_acc {acc_ema:.4f}")


if __name__ == "__main__":
    main()
