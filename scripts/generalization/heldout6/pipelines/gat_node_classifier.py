"""Two-layer graph attention network doing node classification on a fixed random graph."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class GATLayer(nn.Module):
    def __init__(self, in_dim, out_dim, heads, attn_drop):
        super().__init__()
        self.heads, self.out_dim = heads, out_dim
        self.proj = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.attn_src = nn.Parameter(torch.randn(heads, out_dim) * 0.1)
        self.attn_dst = nn.Parameter(torch.randn(heads, out_dim) * 0.1)
        self.attn_dropout = nn.Dropout(attn_drop)

    def forward(self, x, adj):
        n = x.shape[0]
        h = self.proj(x).view(n, self.heads, self.out_dim)
        e = (h * self.attn_src).sum(-1)[:, None, :] + (h * self.attn_dst).sum(-1)[None, :, :]
        e = F.leaky_relu(e, 0.2).masked_fill(~adj[:, :, None], float("-inf"))
        alpha = self.attn_dropout(e.softmax(dim=1))
        return torch.einsum("ijh,jhd->ihd", alpha, h).reshape(n, -1)


class GAT(nn.Module):
    def __init__(self, in_dim, hidden, n_classes, heads=4, drop=0.3):
        super().__init__()
        self.feat_dropout = nn.Dropout(drop)
        self.gat1 = GATLayer(in_dim, hidden, heads, drop)
        self.gat2 = GATLayer(hidden * heads, n_classes, 1, drop)

    def forward(self, x, adj):
        h = F.elu(self.gat1(self.feat_dropout(x), adj))
        return self.gat2(self.feat_dropout(h), adj)


def random_graph(gen, n, p_edge, in_dim, n_classes):
    labels = torch.randint(0, n_classes, (n,), generator=gen)
    same = labels[:, None] == labels[None, :]
    probs = torch.where(same, torch.full((n, n), p_edge * 3), torch.full((n, n), p_edge))
    adj = torch.rand(n, n, generator=gen) < probs
    adj = adj | adj.t() | torch.eye(n, dtype=torch.bool)
    feats = F.one_hot(labels, n_classes).float() @ torch.randn(n_classes, in_dim, generator=gen)
    feats = feats + torch.randn(n, in_dim, generator=gen)
    return feats, adj, labels


@torch.no_grad()
def evaluate(model, x, adj, labels, mask, restore_mode=True):
    was_training = model.training
    model.eval()
    acc = (model(x, adj).argmax(-1)[mask] == labels[mask]).float().mean().item()
    if restore_mode:
        model.train(was_training)
    return acc


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--nodes", type=int, default=48)
    p.add_argument("--hidden", type=int, default=8)
    p.add_argument("--eval-every", type=int, default=3)
    p.add_argument("--bug", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    x, adj, labels = random_graph(gen, args.nodes, 0.05, 12, 3)
    train_mask = torch.rand(args.nodes, generator=gen) < 0.6
    model = GAT(12, args.hidden, 3)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    eval_cfg = {"restore_mode": args.bug != "dropout-in-eval"}
    model.train()
    for step in range(args.steps):
        logits = model(x, adj)
        loss = F.cross_entropy(logits[train_mask], labels[train_mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
        if (step + 1) % args.eval_every == 0:
            print(f"  val acc {evaluate(model, x, adj, labels, ~train_mask, **eval_cfg):.3f}")


if __name__ == "__main__":
    main()
