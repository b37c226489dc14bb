"""Trains a residual MLP regressor with a hand-written reset_parameters() (Kaiming for hidden layers, tiny
normal init for the output layer) on hand-sliced shuffled batches, using Adagrad. Bug `double-init`: an
off-by-one slice makes the Kaiming loop also cover the output layer, which is then initialised a second time."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class ResidualBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return x + F.relu(self.fc(self.norm(x)))


class ResMLP(nn.Module):
    def __init__(self, d_in, dim, depth, d_out, off_by_one_init=False):
        super().__init__()
        self.inp = nn.Linear(d_in, dim)
        self.blocks = nn.ModuleList([ResidualBlock(dim) for _ in range(depth)])
        self.out = nn.Linear(dim, d_out)
        self._off_by_one_init = off_by_one_init
        self.reset_parameters()

    def reset_parameters(self):
        linears = [m for m in self.modules() if isinstance(m, nn.Linear)]
        hidden = linears if self._off_by_one_init else linears[:-1]
        for lin in hidden:
            nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")
            nn.init.zeros_(lin.bias)
        out = linears[-1]
        nn.init.normal_(out.weight, std=1e-2)
        nn.init.zeros_(out.bias)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=24)
    p.add_argument("--optimizer", choices=["adagrad", "sgd"], default="adagrad")
    p.add_argument("--bug", choices=["none", "double-init"], default="none")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    n, d_in = 400, 10
    x = torch.randn(n, d_in, generator=gen)
    y = torch.stack([torch.sin(x[:, 0]) + x[:, 1] * x[:, 2], torch.cos(x[:, 3]) - 0.5 * x[:, 4]], dim=1)

    model = ResMLP(d_in, 32, depth=3, d_out=2, off_by_one_init=(args.bug == "double-init"))
    if args.optimizer == "adagrad":
        optimizer = torch.optim.Adagrad(model.parameters(), lr=args.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)

    perm = torch.randperm(n, generator=gen)
    cursor = 0
    model.train()
    for _step in range(args.steps):
        if cursor + args.batch_size > n:
            perm, cursor = torch.randperm(n, generator=gen), 0
        idx = perm[cursor:cursor + args.batch_size]
        cursor += args.batch_size
        loss = F.smooth_l1_loss(model(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
