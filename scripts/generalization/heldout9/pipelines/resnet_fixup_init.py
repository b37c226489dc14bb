"""Small residual CNN on synthetic oriented-grating images, with explicit weight init."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class TinyResNet(nn.Module):
    def __init__(self, n_cls=4, width=8):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.stem_bn = nn.BatchNorm2d(width)
        self.layer1 = BasicBlock(width, width, 1)
        self.layer2 = BasicBlock(width, 2 * width, 2)
        self.fc = nn.Linear(2 * width, n_cls)

    def forward(self, x):
        x = F.relu(self.stem_bn(self.stem(x)))
        x = self.layer2(self.layer1(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def init_weights(model, first_layer=0, zero_init_residual=True):
    """He-init every conv/linear in definition order; optionally zero the last BN of each block."""
    layers = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    for i in range(first_layer, len(layers)):
        m = layers[i]
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        else:
            nn.init.normal_(m.weight, std=0.01)
            nn.init.zeros_(m.bias)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    if zero_init_residual:
        for m in model.modules():
            if isinstance(m, BasicBlock):
                nn.init.zeros_(m.bn2.weight)


def gratings(g, n, n_cls=4, size=16):
    y = torch.randint(0, n_cls, (n,), generator=g)
    theta = y.float() * math.pi / n_cls + 0.15 * torch.randn(n, generator=g)
    freq = 0.6 + 0.2 * torch.rand(n, generator=g)
    yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
    proj = xx[None] * torch.cos(theta)[:, None, None] + yy[None] * torch.sin(theta)[:, None, None]
    img = torch.sin(freq[:, None, None] * proj)
    color = torch.rand(n, 3, 1, 1, generator=g) + 0.5
    x = img[:, None] * color + 0.3 * torch.randn(n, 3, size, size, generator=g)
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--sched", choices=["cosine", "none", "multistep"], default="cosine")
    ap.add_argument("--zero-init-residual", type=int, default=1)
    ap.add_argument("--bug", default="none")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    model = TinyResNet()
    # NB: the stem used to be initialised separately, hence the loop bound.
    init_weights(model, first_layer=1 if args.bug == "double-init" else 0,
                 zero_init_residual=bool(args.zero_init_residual))

    decay, no_decay = [], []
    for _n, p_ in model.named_parameters():
        (no_decay if p_.ndim <= 1 else decay).append(p_)
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=args.lr, momentum=0.9, nesterov=True)
    if args.sched == "cosine":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    elif args.sched == "multistep":
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[args.steps // 2], gamma=0.1)
    else:
        sched = None
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    g = torch.Generator().manual_seed(args.seed + 5)

    for step in range(args.steps):
        model.train()
        for _k in range(args.accum):
            x, y = gratings(g, args.batch_size)
            loss = criterion(model(x), y) / args.accum
            loss.backward()
        opt.step()
        opt.zero_grad()
        if sched:
            sched.step()
        print(f"step {step} loss {loss.item() * args.accum:.4f}")

    model.eval()
    xt, yt = gratings(torch.Generator().manual_seed(2024), 256)
    with torch.no_grad():
        out = model(xt)
    print(f"test_loss {F.cross_entropy(out, yt).item():.4f} test_acc {(out.argmax(1) == yt).float().mean().item():.4f}")


if __name__ == "__main__":
    main()
