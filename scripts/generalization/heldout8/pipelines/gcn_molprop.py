"""Graph convolutional network regressing a property of random small graphs (dense adjacency batches), RAdam."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class GraphConv(nn.Module):
    def __init__(self, fin, fout):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(fin, fout))
        self.bias = nn.Parameter(torch.empty(fout))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.xavier_uniform_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x, adj_norm):
        return adj_norm @ (x @ self.weight) + self.bias


class Readout(nn.Module):
    def __init__(self, fin, fout, init="default"):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(fout, fin))
        self.bias = nn.Parameter(torch.empty(fout))
        self.reset_parameters(init)

    def reset_parameters(self, init="default"):
        if init == "small":
            nn.init.normal_(self.weight, std=0.01)
        else:
            nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        nn.init.zeros_(self.bias)

    def forward(self, h):
        return F.linear(h, self.weight, self.bias)


class GCN(nn.Module):
    def __init__(self, fin, hidden, layers, readout_init="default"):
        super().__init__()
        dims = [fin] + [hidden] * layers
        self.convs = nn.ModuleList([GraphConv(a, b) for a, b in zip(dims[:-1], dims[1:], strict=False)])
        self.norm = nn.LayerNorm(hidden)
        self.readout = Readout(hidden, 1, init=readout_init)

    def forward(self, x, adj_norm, mask):
        for conv in self.convs:
            x = F.relu(conv(x, adj_norm))
        x = self.norm(x) * mask.unsqueeze(-1)
        pooled = x.sum(1) / mask.sum(1, keepdim=True)
        return self.readout(pooled).squeeze(-1)


def random_graphs(gen, bs, n, fin):
    sizes = torch.randint(4, n + 1, (bs,), generator=gen)
    mask = (torch.arange(n)[None, :] < sizes[:, None]).float()
    a = (torch.rand(bs, n, n, generator=gen) < 0.3).float()
    a = torch.triu(a, 1)
    a = (a + a.transpose(1, 2)) * mask[:, :, None] * mask[:, None, :]
    a_hat = a + torch.diag_embed(mask)
    deg = a_hat.sum(-1).clamp(min=1)
    d = deg.rsqrt()
    adj_norm = d[:, :, None] * a_hat * d[:, None, :]
    x = torch.randn(bs, n, fin, generator=gen) * mask[:, :, None]
    y = a.sum((1, 2)) / (2 * sizes.float()) + 0.1 * x[..., 0].sum(1)
    return x, adj_norm, mask, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--readout-init", default="small", choices=["small", "default"])
    ap.add_argument("--bug", default=None)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 99)
    fin, n_nodes = 5, 10
    if args.bug == "double-init":
        # legacy code path: build with defaults, then apply the configured readout init
        model = GCN(fin, args.hidden, args.layers)
        model.readout.reset_parameters(args.readout_init)
    else:
        model = GCN(fin, args.hidden, args.layers, readout_init=args.readout_init)
    opt = torch.optim.RAdam(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        x, adj, mask, y = random_graphs(gen, args.batch_size, n_nodes, fin)
        pred = model(x, adj, mask)
        loss = F.smooth_l1_loss(pred, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
