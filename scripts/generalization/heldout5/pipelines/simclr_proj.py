"""SimCLR-style contrastive learning (1D-signal encoder + MLP projection head, NT-Xent loss) on synthetic augmented signals."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def init_linear(module):
    if isinstance(module, nn.Linear):
        nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
        nn.init.zeros_(module.bias)


class ProjectionHead(nn.Module):
    def __init__(self, dim, proj_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, proj_dim))
        self.net.apply(init_linear)

    def forward(self, h):
        return self.net(h)


class SimCLR(nn.Module):
    def __init__(self, dim, proj_dim, reinit_all=False):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv1d(1, 8, 5, padding=2), nn.BatchNorm1d(8), nn.ReLU(),
            nn.Conv1d(8, 16, 5, padding=2, stride=2), nn.BatchNorm1d(16), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(16, dim),
        )
        self.projector = ProjectionHead(dim, proj_dim)
        init_modules = self.modules() if reinit_all else self.encoder.modules()
        for m in init_modules:
            init_linear(m)

    def forward(self, x):
        return self.projector(self.encoder(x))


def nt_xent(z1, z2, temperature):
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = z @ z.t() / temperature
    sim.fill_diagonal_(float("-inf"))
    n = z1.shape[0]
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(sim, targets)


def augment(x, g):
    scale = 1 + 0.2 * torch.randn(x.shape[0], 1, 1, generator=g)
    shift = torch.randint(-3, 4, (1,), generator=g).item()
    return torch.roll(x * scale, shifts=shift, dims=-1) + 0.1 * torch.randn(x.shape, generator=g)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--temperature", type=float, default=0.2)
    p.add_argument("--bug", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = SimCLR(dim=32, proj_dim=16, reinit_all=args.bug == "double-init")
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(args.seed + 11)
    t = torch.linspace(0, 6.28, 32)
    for step in range(args.steps):
        freqs = torch.randint(1, 5, (args.batch_size, 1), generator=g).float()
        x = torch.sin(freqs * t).unsqueeze(1)
        optimizer.zero_grad()
        loss = nt_xent(model(augment(x, g)), model(augment(x, g)), args.temperature)
        loss.backward()
        optimizer.step()
        print(f"step {step} nt-xent {loss.item():.4f}")
    return model


if __name__ == "__main__":
    main()
